import { describe, expect, it } from 'vitest';
import type { ClaimedDelivery } from '../../../src/webhooks/delivery/claim.ts';
import { LocalQueue, type Queued } from '../../../src/webhooks/delivery/local-queue.ts';

/*
 * The sender's slots shared between owners (the host accounts that own the endpoints): a freed
 * slot goes to the owner with the fewest attempts in flight, and the last idleOwnerSlots free slots
 * go only to owners with nothing in flight (docs/adr/0040-webhook-slots-fair-between-owners.md).
 */

let nextId = 1;
const delivery = (hostId: number, endpointId: number): ClaimedDelivery => ({
  id: nextId,
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
  dueAt: nextId++,
  traceparent: null,
  tracestate: null,
});
/** `n` deliveries of each of `endpoints` endpoints of `host` (endpoint ids host*100 + i). */
const backlog = (host: number, endpoints: number, n: number): Queued[] =>
  Array.from({ length: endpoints * n }, (_, i) => ({ d: delivery(host, host * 100 + (i % endpoints)), startBy: Infinity }));
const limits = { slots: 32, perEndpoint: 4, perHost: 8, claimAhead: 8, idleOwnerSlots: 4 };
const drain = (q: LocalQueue) => {
  const out: ClaimedDelivery[] = [];
  for (let d = q.next(); d; d = q.next()) out.push(d);
  return out;
};

describe('slots shared between owners', () => {
  it('spreads ten busy owners over the slots, fewest in flight first, and keeps four for owners with nothing in flight', () => {
    const q = new LocalQueue(limits);
    for (let host = 1; host <= 10; host++) q.add(backlog(host, 10, 5));
    expect(drain(q)).toHaveLength(28);
    expect(q.stats()).toMatchObject({ inFlight: 28, ownersInFlight: 10, ownersAtCap: 0, topOwners: [3, 3, 3, 3, 3] });

    // Quiet owners arrive: each takes a kept slot at once, until none is left.
    for (let host = 11; host <= 15; host++) q.add(backlog(host, 1, 1));
    expect(drain(q).map((d) => d.hostId)).toEqual([11, 12, 13, 14]);
    expect(q.stats()).toMatchObject({ inFlight: 32, ownersWaiting: 1 });

    // A busy owner's attempt ends: the freed slot goes to the owner still waiting with nothing in flight.
    q.release(delivery(1, 100));
    expect(q.next()?.hostId).toBe(15);
  });

  it("keeps the kept slots from a lone owner's second and later attempts", () => {
    const q = new LocalQueue({ ...limits, slots: 10, perHost: 8, idleOwnerSlots: 4 });
    q.add(backlog(1, 4, 5));
    // 10 slots, 4 kept: the owner's first takes any slot, its next ones only while more than 4 are free.
    expect(drain(q)).toHaveLength(6);
    expect(q.stats()).toMatchObject({ inFlight: 6, ownersAtCap: 0, ownersWaiting: 0 });
  });

  it('gives a freed slot to the owner with the fewest in flight, even one that came after, with no slot kept', () => {
    const q = new LocalQueue({ ...limits, slots: 4, idleOwnerSlots: 0 });
    q.add(backlog(1, 2, 10));
    expect(drain(q)).toHaveLength(4); // owner 1 holds every slot
    q.add(backlog(2, 1, 1));
    expect(q.next()).toBeUndefined();
    q.release(delivery(1, 100));
    expect(q.next()?.hostId).toBe(2); // not owner 1's next, though its turn came first
  });

  it('claims the first delivery of owners holding nothing beyond the claim-ahead room, one round of slots at most', () => {
    const q = new LocalQueue({ ...limits, slots: 4, claimAhead: 2 });
    q.add(backlog(1, 2, 4)); // 8 claimed: the claim-ahead room (4 × 2) spent
    expect(q.claimRoom()).toBe(0);
    expect(q.newcomerRoom()).toBe(4);
    q.add(backlog(2, 1, 3));
    expect(q.newcomerRoom()).toBe(1);
  });
});
