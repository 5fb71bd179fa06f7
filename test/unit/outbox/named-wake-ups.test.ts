import { describe, expect, it } from 'vitest';
import { LoopWaits, notifiedBy, publicIdParts } from '../../../src/outbox/testing.ts';

/*
 * A wake-up that names its message (src/outbox/channel.ts), and the loop's record of them
 * (src/outbox/runner/waits.ts): the next claim takes the named messages by id only when every
 * wake-up since the last walk named one.
 */

/** A public id as outbox_public_id derives it: the millisecond, version 7, variant, the id. */
function derived(ms: number, id: number): string {
  const hex = ms.toString(16).padStart(12, '0') + '7000' + (0x8000000000000000n | BigInt(id)).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

describe('notifiedBy', () => {
  it('reads the id and the time a derived public id holds', () => {
    const ms = Date.parse('2026-12-07T18:00:00.123Z');
    const publicId = derived(ms, 4242);
    expect(publicIdParts(publicId)!.id).toBe('4242');
    expect(notifiedBy(publicId)).toEqual({ id: 4242, createdAtMs: ms });
  });

  it('names nothing for a topic, an empty payload, a random UUID or an id past 2^53', () => {
    expect(notifiedBy(undefined)).toBeNull();
    expect(notifiedBy('')).toBeNull();
    expect(notifiedBy('booking.created')).toBeNull();
    expect(notifiedBy('0193e7a2-7c4d-7b1e-9f3a-2d5c8e1f4a6b')).toBeNull();
    expect(notifiedBy(derived(Date.now(), 2 ** 53 + 2))).toBeNull();
  });
});

describe('LoopWaits: the wake-ups that named their messages', () => {
  const a = { id: 1, createdAtMs: 1 };
  const b = { id: 2, createdAtMs: 2 };

  it('gives them to the next claim, once, when each wake-up named one', () => {
    const w = new LoopWaits();
    w.claimBegins();
    w.wake(a);
    w.wake(b);
    expect(w.takeNotified(10)).toEqual([a, b]);
    expect(w.pending).toBe(false);
    expect(w.takeNotified(10)).toBeNull();
  });

  it('walks instead after a wake-up that named nothing, or when more were named than a claim takes', () => {
    const w = new LoopWaits();
    w.wake(a);
    w.wake(null);
    w.wake(b);
    expect(w.takeNotified(10)).toBeNull();
    expect(w.pending).toBe(true);
    w.claimBegins();
    w.wake(a);
    w.wake(b);
    expect(w.takeNotified(1)).toBeNull();
    w.claimBegins();
    w.maxNotified = 1;
    w.wake(a);
    w.wake(b);
    expect(w.takeNotified(10)).toBeNull();
  });

  it('keeps the settled keys for the loop to ask about: a claim by id does not answer them', () => {
    const w = new LoopWaits();
    w.keepKeys = true;
    w.settled('k1');
    w.wake(a);
    expect(w.takeNotified(10)).toEqual([a]);
    expect(w.takeSettledKeys()).toEqual(['k1']);
  });
});
