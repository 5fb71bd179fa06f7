import { describe, expect, it } from 'vitest';
import { EventsUnavailableError, FAILURES_TO_OPEN, MAX_COOL_DOWN_MS, MIN_COOL_DOWN_MS, PublishCircuit } from '../../src/events/circuit.ts';

/* The relay's circuit breaker: when it lets publishes through, and when it fails them at once. */

function circuit() {
  let now = 1_000_000;
  const c = new PublishCircuit('nats://127.0.0.1:4222', () => now);
  return { c, advance: (ms: number) => (now += ms) };
}

describe('PublishCircuit', () => {
  it(`opens after ${FAILURES_TO_OPEN} failures in a row, for a cool-down that doubles up to a cap`, () => {
    const { c, advance } = circuit();
    for (let i = 1; i < FAILURES_TO_OPEN; i++) expect(c.failed()).toBe(false);
    expect(() => c.check()).not.toThrow();
    expect(c.failed()).toBe(true);
    expect(() => c.check()).toThrow(EventsUnavailableError);
    advance(MIN_COOL_DOWN_MS);
    expect(() => c.check()).not.toThrow(); // the probe goes through
    expect(c.failed()).toBe(true); // and fails: open again, twice as long
    advance(MIN_COOL_DOWN_MS);
    expect(c.isOpen).toBe(true);
    advance(MIN_COOL_DOWN_MS);
    expect(c.isOpen).toBe(false);
    for (let i = 0; i < 10; i++) {
      c.failed();
      advance(MAX_COOL_DOWN_MS);
    }
    c.failed();
    advance(MAX_COOL_DOWN_MS - 1);
    expect(c.isOpen).toBe(true);
    advance(1);
    expect(c.isOpen).toBe(false);
  });

  it('closes on a success, and counts failures afresh', () => {
    const { c } = circuit();
    for (let i = 0; i < FAILURES_TO_OPEN - 1; i++) c.failed();
    c.succeeded();
    expect(c.failed()).toBe(false);
    expect(c.isOpen).toBe(false);
  });

  it('is open from a disconnect until the reconnect, whatever the count', () => {
    const { c, advance } = circuit();
    c.disconnected();
    advance(60_000);
    expect(() => c.check()).toThrow(/disconnected 60 s ago/);
    c.reconnected();
    expect(() => c.check()).not.toThrow();
  });
});
