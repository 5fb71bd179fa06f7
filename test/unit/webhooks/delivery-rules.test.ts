import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { isGlobalAddress } from '../../../src/webhooks/address-policy.ts';
import { judge } from '../../../src/webhooks/delivery/schedule.ts';
import { parseRetryAfter, type AttemptResult } from '../../../src/webhooks/delivery/send.ts';
import { newSecret, signatureHeader } from '../../../src/webhooks/secret.ts';

/* The rules a webhook delivery follows that need no network: which addresses are public, what an answer means, and the signature. */

describe('isGlobalAddress', () => {
  it.each([
    '127.0.0.1',
    '127.255.0.9',
    '10.0.0.1',
    '172.16.5.4',
    '172.31.255.255',
    '192.168.0.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '198.18.0.1',
    '::1',
    '::',
    'fe80::1',
    'fd00::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:10.0.0.1',
    '64:ff9b::a00:1',
    '2001:db8::1',
    'not-an-address',
  ])('refuses %s', (a) => expect(isGlobalAddress(a)).toBe(false));

  it.each(['93.184.215.14', '8.8.8.8', '172.32.0.1', '100.128.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8'])('accepts %s', (a) =>
    expect(isGlobalAddress(a)).toBe(true),
  );
});

const answer = (status: number | null, retryAfterSeconds: number | null = null): AttemptResult => ({
  status,
  body: null,
  retryAfterSeconds,
  durationMs: 1,
  error: status === null ? 'timed out' : null,
});

describe('judge', () => {
  const schedule = [5, 300, 1800];
  const mid = () => 0.5; // no jitter

  it('takes any 2xx as success', () => {
    for (const s of [200, 201, 202, 204, 299]) expect(judge(answer(s), 1, schedule, mid)).toEqual({ kind: 'succeeded' });
  });

  it('retries other answers and no answer on the schedule, then fails after its last delay', () => {
    expect(judge(answer(500), 1, schedule, mid)).toEqual({ kind: 'retry', delaySeconds: 5 });
    expect(judge(answer(null), 2, schedule, mid)).toEqual({ kind: 'retry', delaySeconds: 300 });
    expect(judge(answer(301), 3, schedule, mid)).toEqual({ kind: 'retry', delaySeconds: 1800 });
    expect(judge(answer(500), 4, schedule, mid)).toEqual({ kind: 'failed' });
  });

  it('jitters each delay by at most 10 %', () => {
    expect(judge(answer(500), 2, schedule, () => 0)).toEqual({ kind: 'retry', delaySeconds: 270 });
    expect(judge(answer(500), 2, schedule, () => 1)).toEqual({ kind: 'retry', delaySeconds: 330 });
  });

  it('ends at once on 410 Gone', () => {
    expect(judge(answer(410), 1, schedule, mid)).toEqual({ kind: 'gone' });
  });

  it("waits at least a 429's or 503's Retry-After, capped at the schedule's longest delay", () => {
    expect(judge(answer(429, 60), 1, schedule, mid)).toEqual({ kind: 'retry', delaySeconds: 60 });
    expect(judge(answer(503, 1), 2, schedule, mid)).toEqual({ kind: 'retry', delaySeconds: 300 });
    expect(judge(answer(503, 86_400 * 365), 1, schedule, mid)).toEqual({ kind: 'retry', delaySeconds: 1800 });
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    const now = Date.parse('2026-12-01T12:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120);
    expect(parseRetryAfter('Tue, 01 Dec 2026 12:01:00 GMT', now)).toBe(60);
    expect(parseRetryAfter('soon', now)).toBeNull();
    expect(parseRetryAfter(undefined, now)).toBeNull();
  });
});

describe('signatures', () => {
  it('are what the standardwebhooks package verifies, with either live secret', () => {
    const [oldSecret, newOne] = [newSecret(), newSecret()];
    const id = 'b7c1f6f4-6d8e-4a7e-9d43-0c9b8a1f2e3d';
    const ts = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({ type: 'booking.created', data: { total: 45_678 } });
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(ts),
      'webhook-signature': signatureHeader([newOne, oldSecret], id, ts, body),
    };
    expect(new Webhook(newOne).verify(body, headers)).toEqual(JSON.parse(body));
    expect(new Webhook(oldSecret).verify(body, headers)).toEqual(JSON.parse(body));
    expect(() => new Webhook(newSecret()).verify(body, headers)).toThrow();
    expect(() => new Webhook(newOne).verify(body.replace('45678', '45679'), headers)).toThrow();
  });
});
