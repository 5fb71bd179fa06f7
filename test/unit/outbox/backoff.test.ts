import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { backoffDelaySeconds, retryDelaySeconds } from '../../../src/outbox/index.ts';

const defaults = { baseSeconds: 2, maxSeconds: 256 };

describe('backoff', () => {
  it('doubles from the base and is capped: 2, 4, 8, …, 128, 256, 256', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8, 9, 20].map((n) => backoffDelaySeconds(n, defaults))).toEqual([2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
  });

  it('with jitter off, the delay is exactly the schedule', () => {
    expect([1, 2, 3, 4, 5, 6, 7].map((n) => retryDelaySeconds(n, { ...defaults, jitter: false }))).toEqual([2, 4, 8, 16, 32, 64, 128]);
  });

  it('with equal jitter, the delay lies in [delay/2, delay] and uses the whole range', () => {
    expect(retryDelaySeconds(3, { ...defaults, jitter: true, random: () => 0 })).toBe(4);
    expect(retryDelaySeconds(3, { ...defaults, jitter: true, random: () => 0.5 })).toBe(6);
    expect(retryDelaySeconds(3, { ...defaults, jitter: true, random: () => 0.999999 })).toBeCloseTo(8, 4);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 30 }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (n, r) => {
        const full = backoffDelaySeconds(n, defaults);
        const d = retryDelaySeconds(n, { ...defaults, jitter: true, random: () => r });
        return d >= full / 2 && d <= full;
      }),
    );
  });

  it('with the real Math.random, repeated delays differ', () => {
    const delays = Array.from({ length: 50 }, () => retryDelaySeconds(5, { ...defaults, jitter: true }));
    expect(new Set(delays).size).toBeGreaterThan(40);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(16);
      expect(d).toBeLessThanOrEqual(32);
    }
  });
});
