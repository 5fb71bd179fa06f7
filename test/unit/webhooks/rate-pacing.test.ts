import { describe, expect, it } from 'vitest';
import type { ClaimedDelivery } from '../../../src/webhooks/delivery/claim.ts';
import { LocalQueue, type Queued } from '../../../src/webhooks/delivery/local-queue.ts';

/*
 * A rated endpoint's deliveries in the sender's local queue: each waits for its start time from
 * the claim, and this process's starts of one endpoint stay 1/rate apart even when two claims'
 * start times come closer (each is counted from its own answer, and claims take varying times).
 */

let nextId = 1;
const delivery = (endpointId: number, rate?: number): ClaimedDelivery => ({
  id: nextId,
  publicId: `d${nextId}`,
  claimId: `c${nextId}`,
  attempt: 1,
  endpointId,
  endpointPublicId: `e${endpointId}`,
  hostId: 1,
  url: 'https://hooks.example.test/',
  secrets: ['whsec_x'],
  eventType: 'booking.created',
  body: '{}',
  dueAt: nextId++,
  traceparent: null,
  tracestate: null,
  ...(rate ? { rate } : {}),
});
/** At 5 per second: 200 ms apart. */
const paced = (endpointId: number, notBefore: number): Queued => ({ d: delivery(endpointId, 5), notBefore, gapMs: 200, startBy: Infinity });
const limits = { slots: 32, perEndpoint: 4, perHost: 8, claimAhead: 8 };

describe('a rated endpoint in the local queue', () => {
  it('starts nothing before its start time, and says when the next one is', () => {
    const q = new LocalQueue(limits);
    q.add([paced(1, 100)]);
    expect(q.next(50)).toBeUndefined();
    expect(q.nextStartAt(50)).toBe(100);
    expect(q.next(100)?.endpointId).toBe(1);
    expect(q.nextStartAt(100)).toBeUndefined();
  });

  it('keeps its starts 1/rate apart when two claims gave start times closer than that', () => {
    const q = new LocalQueue(limits);
    q.add([paced(1, 0), paced(1, 190)]);
    expect(q.next(0)).toBeDefined();
    expect(q.next(190)).toBeUndefined();
    expect(q.nextStartAt(190)).toBe(200);
    expect(q.next(200)).toBeDefined();
  });

  it('holds up neither an unlimited endpoint nor another rated one while it waits', () => {
    const q = new LocalQueue(limits);
    q.add([paced(1, 0), paced(1, 10), { d: delivery(2), startBy: Infinity }, paced(3, 0)]);
    const started = [q.next(10), q.next(10), q.next(10), q.next(10)].map((d) => d?.endpointId);
    expect(started).toEqual([1, 2, 3, undefined]);
  });
});
