import { describe, expect, it } from 'vitest';
import type { ClaimedDelivery } from '../../../src/webhooks/delivery/claim.ts';
import { LocalQueue, type Queued } from '../../../src/webhooks/delivery/local-queue.ts';

/*
 * The webhook sender's local queue: what it starts, in which order, and what it gives back. The
 * claim fills it ahead of the free slots; the caps a claim used to apply when it started
 * deliveries itself must hold here.
 */

let nextId = 1;
const delivery = (hostId: number, endpointId: number, dueAt = nextId): ClaimedDelivery => ({
  id: nextId++,
  publicId: `d${nextId}`,
  claimId: `c${nextId}`,
  attempt: 1,
  endpointId,
  endpointPublicId: `e${endpointId}`,
  hostId,
  url: 'https://hooks.example.test/',
  secrets: ['whsec_x'],
  eventType: 'booking.created',
  body: '{}',
  dueAt,
  traceparent: null,
  tracestate: null,
});
const queued = (d: ClaimedDelivery, startBy = Infinity): Queued => ({ d, startBy });
const limits = { slots: 32, perEndpoint: 4, perHost: 8, claimAhead: 8 };
/** Everything the queue starts now, in order. */
const drain = (q: LocalQueue) => {
  const out: ClaimedDelivery[] = [];
  for (let d = q.next(); d; d = q.next()) out.push(d);
  return out;
};

describe('LocalQueue', () => {
  it('starts no more than each endpoint, each host and the sender may have in flight', () => {
    const q = new LocalQueue({ ...limits, slots: 10 });
    // Host 1: three endpoints with 6 due each; host 2: one endpoint with 6 due.
    const batch = [1, 2, 3].flatMap((e) => Array.from({ length: 6 }, () => queued(delivery(1, e))));
    batch.push(...Array.from({ length: 6 }, () => queued(delivery(2, 9))));
    q.add(batch);
    const started = drain(q);
    const count = (f: (d: ClaimedDelivery) => boolean) => started.filter(f).length;
    expect(started).toHaveLength(10); // the slots
    expect(count((d) => d.hostId === 1)).toBeLessThanOrEqual(8);
    for (const e of [1, 2, 3, 9]) expect(count((d) => d.endpointId === e)).toBeLessThanOrEqual(4);
    expect(q.sending).toBe(10);
    expect(q.queued).toBe(14);
  });

  it('takes turns between hosts, oldest due first within a host', () => {
    const q = new LocalQueue(limits);
    // Host 1's backlog came in one claim, due before host 2's and host 3's first delivery.
    q.add([1, 2, 3, 4, 5].map((t) => queued(delivery(1, 1, t))));
    q.add([queued(delivery(2, 2, 10)), queued(delivery(3, 3, 11)), queued(delivery(2, 2, 9))]);
    const order = drain(q).map((d) => [d.hostId, d.dueAt]);
    expect(order).toEqual([
      [1, 1],
      [2, 9],
      [3, 11],
      [1, 2],
      [2, 10],
      [1, 3],
      [1, 4],
    ]);
  });

  it('starts the next delivery of an endpoint when a slot of it frees, and counts what a claim may take', () => {
    const q = new LocalQueue({ ...limits, perEndpoint: 1 });
    q.add([queued(delivery(1, 1)), queued(delivery(1, 1))]);
    const [first] = drain(q);
    expect(q.next()).toBeUndefined(); // the endpoint is full; the second waits
    expect(q.claimedByEndpoint.get(1)).toBe(2);
    expect(q.claimRoom()).toBe(32 * 8 - 2);
    q.release(first!);
    expect(q.claimedByEndpoint.get(1)).toBe(1);
    expect(q.next()?.endpointId).toBe(1);
  });

  it('gives back what may no longer start, and what is taken out, uncounted', () => {
    const q = new LocalQueue({ ...limits, perEndpoint: 1 });
    const late = delivery(1, 1, 1e9); // due last: it waits behind the first of its endpoint
    q.add([queued(delivery(1, 1)), queued(late, 1000), queued(delivery(2, 2)), queued(delivery(2, 2))]);
    drain(q); // one of each endpoint in flight
    expect(q.expired(999)).toEqual([]);
    expect(q.expired(1001)).toEqual([late]);
    expect(q.claimedByEndpoint.get(1)).toBe(1);
    expect(q.remove((x) => x.d.endpointId === 2).map((d) => d.endpointId)).toEqual([2]);
    expect(q.claimedByHost.get(2)).toBe(1);
    expect(q.queued).toBe(0);
    expect(q.next()).toBeUndefined();
  });
});
