import { describe, expect, it } from 'vitest';
import { PermanentError } from '../../../src/errors.ts';
import { FAILURE_RULES } from '../../../src/worker/failure-rules.ts';
import { DependencyUnavailableError } from '../../../src/outbox/index.ts';
import { postponeDelaySeconds, verdictAfterRun, verdictBeforeRun, ALREADY_DONE } from '../../../src/outbox/testing.ts';

const backoff = { baseSeconds: 2, maxSeconds: 256, jitter: false };
const fail = (handler: string, error: unknown, durationMs = 5) => ({ handler, error, durationMs });
const smtp = (code: number) => Object.assign(new Error(`${code} <guest@example.test> said no`), { responseCode: code });

describe('verdictBeforeRun', () => {
  const ok = { handlerCount: 2, attempts: 1, maxAttempts: 8, payloadError: null };
  it('runs the handlers when there is nothing against it', () => {
    expect(verdictBeforeRun(ok)).toBeNull();
  });
  it('no handler: unknown_topic, never dead (even past the attempts)', () => {
    expect(verdictBeforeRun({ ...ok, handlerCount: 0 })).toEqual({ kind: 'unknown_topic' });
    expect(verdictBeforeRun({ ...ok, handlerCount: 0, attempts: 99 })).toEqual({ kind: 'unknown_topic' });
  });
  it('claimed more often than maxAttempts: dead, saying so', () => {
    const v = verdictBeforeRun({ ...ok, attempts: 9 });
    expect(v).toMatchObject({ kind: 'dead', failures: [], succeeded: [] });
    expect(v && 'error' in v && v.error).toMatch(/^worker: NoOutcome: claimed 8 times without an outcome/);
  });
  it('at exactly maxAttempts the handlers still run', () => {
    expect(verdictBeforeRun({ ...ok, attempts: 8 })).toBeNull();
  });
  it('an invalid payload: dead with the payload error', () => {
    expect(verdictBeforeRun({ ...ok, payloadError: 'payload: ZodError: x' })).toMatchObject({
      kind: 'dead',
      error: 'payload: ZodError: x',
    });
  });
});

describe('verdictAfterRun', () => {
  // The application's rules (SMTP 5xx permanent, addresses redacted), as src/worker/outbox-worker.ts gives them.
  const base = { attempts: 1, maxAttempts: 8, ran: ['guest', 'host'], backoff, rules: FAILURE_RULES };
  it('no failure: done (the shared constant, nothing allocated)', () => {
    expect(verdictAfterRun({ ...base, failures: [] })).toBe(ALREADY_DONE);
  });
  it('a transient failure: retry after the backoff, only the failed handler left, the others succeeded', () => {
    const v = verdictAfterRun({ ...base, attempts: 3, failures: [fail('host', smtp(451))] });
    expect(v).toMatchObject({ kind: 'retry', delaySeconds: 8, succeeded: ['guest'] });
    expect(v.kind === 'retry' && v.error).toBe('host: Error: 451 <[email]> said no');
    expect(v.kind === 'retry' && v.failures).toEqual([{ handler: 'host', error: 'host: Error: 451 <[email]> said no', durationMs: 5 }]);
  });
  it('the capped schedule: 2, 4, …, 256, 256', () => {
    const delays = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((attempts) => {
      const v = verdictAfterRun({ ...base, attempts, maxAttempts: 20, failures: [fail('host', new Error('x'))] });
      return v.kind === 'retry' ? v.delaySeconds : -1;
    });
    expect(delays).toEqual([2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
  });
  it('jitter stays within [delay/2, delay], from the injected random source', () => {
    const at = (r: number) =>
      verdictAfterRun({
        ...base,
        attempts: 3,
        failures: [fail('h', new Error('x'))],
        backoff: { ...backoff, jitter: true, random: () => r },
      });
    expect(at(0)).toMatchObject({ delaySeconds: 4 });
    expect(at(1)).toMatchObject({ delaySeconds: 8 });
  });
  it('the last attempt failing: dead', () => {
    expect(verdictAfterRun({ ...base, attempts: 8, failures: [fail('host', new Error('x'))] })).toMatchObject({ kind: 'dead' });
  });
  it('every failure permanent (PermanentError, SMTP 5xx): dead at once', () => {
    const v = verdictAfterRun({ ...base, failures: [fail('guest', new PermanentError('gone')), fail('host', smtp(550))] });
    expect(v).toMatchObject({ kind: 'dead', succeeded: [] });
    expect(v.kind === 'dead' && v.error).toBe('guest: PermanentError: gone | host: Error: 550 <[email]> said no');
  });
  it('one permanent and one transient failure: retry (a 550 for one must not stop the retry of a 451 for the other)', () => {
    expect(verdictAfterRun({ ...base, failures: [fail('guest', smtp(550)), fail('host', smtp(451))] })).toMatchObject({ kind: 'retry' });
  });
  it('caps the joined error at 4,000 characters', () => {
    const long = 'x'.repeat(3000);
    const v = verdictAfterRun({ ...base, failures: [fail('guest', new Error(long)), fail('host', new Error(long))] });
    expect(v.kind === 'retry' && v.error.length).toBe(4000);
  });
});

describe('a downstream unavailable (DependencyUnavailableError): postponed, not an attempt', () => {
  const base = { attempts: 1, maxAttempts: 3, ran: ['guest', 'relay'], backoff, rules: FAILURE_RULES };
  const away = (seconds?: number) =>
    new DependencyUnavailableError('NATS at 127.0.0.1:4222 is not answering', { retryAfterSeconds: seconds });

  it('postpones for as long as the handler asks, never DEAD, however many attempts the message has made', () => {
    for (const attempts of [1, 3, 50]) {
      const v = verdictAfterRun({ ...base, attempts, failures: [fail('relay', away(12))] });
      expect(v).toMatchObject({ kind: 'postpone', delaySeconds: 12, succeeded: ['guest'] });
      expect(v.kind === 'postpone' && v.error).toBe('relay: DependencyUnavailableError: NATS at 127.0.0.1:4222 is not answering');
    }
  });
  it('caps the wait at BACKOFF_MAX_SECONDS (an outage of a day waits 256 s at a time), and waits the first step when not told', () => {
    expect(verdictAfterRun({ ...base, failures: [fail('relay', away(86_400))] })).toMatchObject({ kind: 'postpone', delaySeconds: 256 });
    expect(verdictAfterRun({ ...base, failures: [fail('relay', away())] })).toMatchObject({ kind: 'postpone', delaySeconds: 2 });
    expect(postponeDelaySeconds(100, { ...backoff, jitter: true, random: () => 0 })).toBe(50);
  });
  it("beside a failure of the message's own, the attempt counts: retry, or DEAD at the last one", () => {
    const failures = [fail('guest', smtp(451)), fail('relay', away(5))];
    expect(verdictAfterRun({ ...base, failures })).toMatchObject({ kind: 'retry', delaySeconds: 2 });
    expect(verdictAfterRun({ ...base, attempts: 3, failures })).toMatchObject({ kind: 'dead' });
    // A permanent failure beside it: DEAD, as every failure of the message's own is permanent.
    expect(verdictAfterRun({ ...base, failures: [fail('guest', smtp(550)), fail('relay', away(5))] })).toMatchObject({ kind: 'dead' });
  });
});
