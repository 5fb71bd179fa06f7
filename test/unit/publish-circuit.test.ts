import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { MAX_COOL_DOWN_MS, MIN_COOL_DOWN_MS, PublishCircuit, type Ticket } from '../../src/events/circuit.ts';
import { EventsUnavailableError } from '../../src/events/errors.ts';

/* The relay's circuit breaker: when it lets publishes through, and when it fails them at once. */

const STALL_MS = 500;

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

function circuit() {
  return new PublishCircuit('127.0.0.1:4222', { stallMs: STALL_MS });
}

/** A publish that never ends unless the test says so, waiting as the publisher waits on it. */
function waiting(c: PublishCircuit, t: Ticket) {
  const outcome = { settled: false, error: undefined as unknown };
  c.unlessTripped(t, new Promise<never>(() => undefined)).catch((err: unknown) => Object.assign(outcome, { settled: true, error: err }));
  return outcome;
}

const openNow = (c: PublishCircuit) => expect(() => c.enter()).toThrow(EventsUnavailableError);

describe('PublishCircuit', () => {
  it('says when it opens, once per outage (not for each failed probe), and when it closes', () => {
    const said: string[] = [];
    const c = new PublishCircuit('127.0.0.1:4222', {
      stallMs: STALL_MS,
      onOpen: (why) => said.push(`open: ${why}`),
      onClose: (awayMs) => said.push(`closed after ${awayMs} ms`),
    });
    c.failed(c.enter(), 'TIMEOUT');
    for (let i = 0; i < 3; i++) {
      vi.advanceTimersByTime(MAX_COOL_DOWN_MS);
      c.failed(c.enter(), 'TIMEOUT');
    }
    vi.advanceTimersByTime(MAX_COOL_DOWN_MS);
    c.answered(c.enter());
    expect(said).toEqual(['open: NATS at 127.0.0.1:4222 is not answering (TIMEOUT)', `closed after ${4 * MAX_COOL_DOWN_MS} ms`]);
  });

  it('opens on the first failure: a hung server is not given three timeouts', () => {
    const c = circuit();
    const t = c.enter();
    vi.advanceTimersByTime(5_000); // the publish timed out; the stall had tripped before it, with t as the probe
    expect(c.current).toBe('half-open');
    expect(c.failed(t, 'TIMEOUT')).toBe(true);
    expect(c.current).toBe('open');
    openNow(c);

    // The same from a fast failure (a refused connection), with nothing else out.
    const d = circuit();
    expect(d.failed(d.enter(), 'ECONNREFUSED')).toBe(true);
    openNow(d);
  });

  it('a stall opens it before any timeout: the oldest publish stays out as the probe, the others are let go at once', async () => {
    const c = circuit();
    const first = c.enter();
    const a = waiting(c, first);
    vi.advanceTimersByTime(100);
    const second = c.enter();
    const b = waiting(c, second);
    vi.advanceTimersByTime(STALL_MS - 101);
    await Promise.resolve();
    expect(c.current).toBe('closed'); // not yet: nothing has been silent for STALL_MS
    vi.advanceTimersByTime(2); // the timer, then the look after the loop has read its sockets
    await vi.runOnlyPendingTimersAsync();
    expect(c.current).toBe('half-open');
    expect(b).toMatchObject({ settled: true });
    expect(b.error).toBeInstanceOf(EventsUnavailableError);
    expect((b.error as Error).message).toMatch(
      /NATS at 127\.0\.0\.1:4222 is not answering \(no reply to any publish for 0\.5 s\).*waits in the outbox/,
    );
    expect(a.settled).toBe(false); // the probe waits for its answer or its timeout
    expect(first.probe).toBe(true);
    openNow(c); // while the probe is out, nothing else goes
    c.answered(first); // NATS answered after all
    expect(c.current).toBe('closed');
    expect(() => c.enter()).not.toThrow();
  });

  it('no stall while replies keep coming, however long one publish waits', () => {
    const c = circuit();
    const slow = c.enter();
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(STALL_MS / 2);
      c.answered(c.enter());
    }
    expect(c.current).toBe('closed');
    c.answered(slow);
  });

  it('a probe that ends with no word about NATS lets the next publish probe, instead of staying half-open', () => {
    const c = circuit();
    c.failed(c.enter(), 'TIMEOUT');
    vi.advanceTimersByTime(MIN_COOL_DOWN_MS);
    const probe = c.enter();
    openNow(c);
    c.forget(probe);
    const next = c.enter();
    expect(next.probe).toBe(true);
    c.answered(next);
    expect(c.current).toBe('closed');
  });

  it('half-open lets exactly one probe through; a failed probe doubles the cool-down, up to the cap', () => {
    const c = circuit();
    c.failed(c.enter(), 'TIMEOUT');
    vi.advanceTimersByTime(MIN_COOL_DOWN_MS - 1);
    openNow(c);
    vi.advanceTimersByTime(1);
    const probe = c.enter();
    expect(probe.probe).toBe(true);
    expect(c.current).toBe('half-open');
    openNow(c);
    openNow(c);
    expect(c.failed(probe, 'TIMEOUT')).toBe(true);
    vi.advanceTimersByTime(2 * MIN_COOL_DOWN_MS - 1);
    openNow(c);
    vi.advanceTimersByTime(1);
    let next = c.enter();
    for (let i = 0; i < 10; i++) {
      c.failed(next, 'TIMEOUT');
      vi.advanceTimersByTime(MAX_COOL_DOWN_MS);
      next = c.enter();
    }
    c.failed(next, 'TIMEOUT');
    vi.advanceTimersByTime(MAX_COOL_DOWN_MS - 1);
    openNow(c);
    vi.advanceTimersByTime(1);
    c.answered(c.enter()); // the probe is answered: closed, cool-down back to its start
    expect(c.current).toBe('closed');
    c.failed(c.enter(), 'TIMEOUT');
    vi.advanceTimersByTime(MIN_COOL_DOWN_MS);
    expect(() => c.enter()).not.toThrow();
  });

  it('a reconnect closes it at once, even in the middle of a long cool-down', () => {
    const c = circuit();
    c.disconnected();
    vi.advanceTimersByTime(60_000);
    expect(() => c.enter()).toThrow(/disconnected 60 s ago/);
    c.reconnected();
    expect(c.current).toBe('closed');
    expect(() => c.enter()).not.toThrow();

    const d = circuit();
    for (let i = 0; i < 5; i++) {
      d.failed(d.enter(), 'TIMEOUT');
      vi.advanceTimersByTime(MAX_COOL_DOWN_MS);
    }
    d.failed(d.enter(), 'TIMEOUT');
    openNow(d);
    d.reconnected();
    expect(() => d.enter()).not.toThrow();
  });

  it('after a reconnect, the silence of publishes sent on the lost connection does not open it again', async () => {
    const c = circuit();
    const before = [c.enter(), c.enter()];
    c.disconnected();
    vi.advanceTimersByTime(3_000);
    c.reconnected();
    await vi.advanceTimersByTimeAsync(4 * STALL_MS);
    expect(c.current).toBe('closed');
    const after = c.enter();
    expect(before.map((t) => c.failed(t, 'TIMEOUT'))).toEqual([false, false]);
    expect(c.current).toBe('closed');
    c.answered(after);
  });

  it('a disconnect lets every publish out go at once: their replies would come on a connection that is gone', async () => {
    const c = circuit();
    const out = [waiting(c, c.enter()), waiting(c, c.enter())];
    c.disconnected();
    await Promise.resolve();
    expect(out.map((o) => o.settled)).toEqual([true, true]);
  });

  it('failures while it is open change nothing: not counted, not extending the cool-down', () => {
    const c = circuit();
    const early = [c.enter(), c.enter(), c.enter()];
    expect(c.failed(early[0]!, 'TIMEOUT')).toBe(true); // opens; early[1] is out, the probe
    expect(c.current).toBe('half-open');
    expect(c.failed(early[2]!, 'TIMEOUT')).toBe(false); // not the probe: no word on NATS now
    expect(c.failed(early[1]!, 'TIMEOUT')).toBe(true); // the probe failed: open for the first cool-down
    vi.advanceTimersByTime(MIN_COOL_DOWN_MS);
    expect(() => c.enter()).not.toThrow(); // not doubled by the failures that came in while it was open
  });

  it('a failure of a publish sent before the last close is stale and keeps it closed', () => {
    const c = circuit();
    const before = c.enter();
    c.disconnected();
    c.reconnected();
    expect(c.failed(before, 'TIMEOUT')).toBe(false);
    expect(c.current).toBe('closed');
  });

  it('says how long NATS has been away: how long a message may as well wait', () => {
    const c = circuit();
    expect(c.awaySeconds()).toBe(1);
    c.failed(c.enter(), 'TIMEOUT');
    vi.advanceTimersByTime(90_000);
    expect(() => c.enter()).not.toThrow(); // the probe
    try {
      c.enter();
      expect.unreachable();
    } catch (err) {
      expect((err as EventsUnavailableError).awaySeconds).toBe(90);
    }
  });
});
