import { describe, expect, it } from 'vitest';
import { ClaimSize } from '../../../src/outbox/testing.ts';

/**
 * Plays claims against a ClaimSize: each entry is how many the outbox had due for that claim; the
 * local queue had run dry each time (handlers faster than claims) unless `queued` says otherwise.
 */
function play(size: ClaimSize, dueEachTime: number[], queued = 0): number[] {
  const asked: number[] = [];
  for (const due of dueEachTime) {
    const limit = size.next;
    asked.push(limit);
    size.claimed(limit, Math.min(limit, due), queued);
  }
  return asked;
}

describe('claim size', () => {
  it('starts at the smallest claim and doubles while claims come back full, up to the largest', () => {
    expect(play(new ClaimSize(20, 1000, 60), Array(8).fill(100_000))).toEqual([20, 40, 80, 160, 320, 640, 1000, 1000]);
  });

  it('keeps the size while full claims find messages still queued: the handlers, not the claims, hold the worker back', () => {
    const size = new ClaimSize(20, 1000, 60);
    play(size, [1e6, 1e6]); // 20, 40 → next 80
    expect(play(size, Array(5).fill(1e6), 3)).toEqual([80, 80, 80, 80, 80]);
    expect(play(size, [1e6])).toEqual([80]);
    expect(size.next).toBe(160);
  });

  it('halves after a claim that came back less than half full, never below the smallest; keeps it in between', () => {
    const size = new ClaimSize(20, 1000, 60);
    play(size, Array(7).fill(100_000)); // at 1000
    expect(play(size, [600, 499, 100, 0, 0, 0, 0])).toEqual([1000, 1000, 500, 250, 125, 62, 31]);
    expect(play(size, [0, 0])).toEqual([20, 20]);
  });

  it('a message that waited more than an eighth of the lease in the local queue halves the next claim, even a full one', () => {
    const size = new ClaimSize(10, 1000, 8); // an eighth: 1 s
    play(size, [1e6, 1e6, 1e6]); // 10, 20, 40 → next 80
    const now = 1_000_000;
    size.started(now + 8_000 - 999, now); // waited 999 ms of its 8 s lease
    size.claimed(size.next, size.next, 0); // full, not crowded: grows
    expect(size.next).toBe(160);
    size.started(now + 8_000 - 1_001, now); // waited 1,001 ms
    size.claimed(160, 160, 0); // full, but crowded: halves
    expect(size.next).toBe(80);
    size.claimed(80, 80, 0); // the crowding was counted once: grows again
    expect(size.next).toBe(160);
  });

  it('a largest claim below the smallest means a fixed size', () => {
    const size = new ClaimSize(500, 20, 60);
    expect(size.max).toBe(500);
    expect(play(size, [1e6, 1e6, 0])).toEqual([500, 500, 500]);
  });

  it('refuses a smallest claim that is not a positive integer', () => {
    expect(() => new ClaimSize(0, 10, 60)).toThrow(/positive integer/);
    expect(() => new ClaimSize(1.5, 10, 60)).toThrow(/positive integer/);
  });
});
