import type { ClaimedDelivery } from './claim.ts';

/** A claimed delivery waiting in the sender's local queue for a slot. */
export interface Queued {
  d: ClaimedDelivery;
  /** performance.now() past which it may not start: its lease no longer covers a whole attempt. */
  startBy: number;
}

export interface SlotLimits {
  /** WEBHOOK_CONCURRENCY: attempts in their HTTP exchange at once. */
  slots: number;
  /** WEBHOOK_ENDPOINT_CONCURRENCY and WEBHOOK_HOST_CONCURRENCY: in flight per endpoint, per host. */
  perEndpoint: number;
  perHost: number;
  /** How many times its slots the sender may hold claimed, in flight and queued (slots.ts CLAIM_AHEAD). */
  claimAhead: number;
}

const bump = (m: Map<number, number>, key: number, by: number) => {
  const n = (m.get(key) ?? 0) + by;
  if (n > 0) m.set(key, n);
  else m.delete(key);
};

/*
 * The sender's slots and its local queue. The sender claims ahead: a claim takes the deliveries
 * due for the free slots *and* what comes after them (each endpoint, each host and the sender up to
 * a multiple of its cap, in flight and queued together: slots.ts CLAIM_AHEAD), so
 * that a slot freed by an answer starts the next delivery at once from here, instead of idling
 * through a claim statement (the claim, one at a time, was what bounded the sender:
 * docs/adr/0036-webhook-keep-alive-per-checked-address.md).
 *
 * What a claim may take is counted here (`claimed`), what may start is decided here (`next`):
 *   - an attempt starts only in a free slot, below its endpoint's and its host's in-flight caps,
 *     exactly as when the claim started them itself;
 *   - hosts take turns: `next` serves the host after the one it served last that has a delivery
 *     it may start, oldest due first within a host; a host's queued deliveries wait for its own
 *     slots and never for another host's;
 *   - a queued delivery whose lease no longer covers an attempt is not started (`expired`): the
 *     sender gives it back to the table.
 */
export class LocalQueue {
  private readonly byHost = new Map<number, Queued[]>();
  /** Hosts in the order they take turns; the head is served next. */
  private turns: number[] = [];
  private readonly inFlight = new Map<number, number>();
  private readonly hostInFlight = new Map<number, number>();
  /** Queued or in flight, by endpoint and by host: what the claim counts as taken. */
  readonly claimedByEndpoint = new Map<number, number>();
  readonly claimedByHost = new Map<number, number>();
  /** Attempts in their HTTP exchange: what the slots count. */
  sending = 0;
  queued = 0;

  constructor(readonly limits: SlotLimits) {}

  /** Adds a claim's deliveries, oldest due first within each host. */
  add(batch: readonly Queued[]): void {
    const sorted = [...batch].sort((a, b) => a.d.dueAt - b.d.dueAt || a.d.id - b.d.id);
    for (const q of sorted) {
      let list = this.byHost.get(q.d.hostId);
      if (!list) {
        list = [];
        this.byHost.set(q.d.hostId, list);
        this.turns.push(q.d.hostId);
      }
      list.push(q);
      this.queued++;
      bump(this.claimedByEndpoint, q.d.endpointId, 1);
      bump(this.claimedByHost, q.d.hostId, 1);
    }
  }

  /** The next delivery that may start now, marked in flight; undefined when none may. */
  next(): ClaimedDelivery | undefined {
    if (this.sending >= this.limits.slots) return undefined;
    for (let i = 0; i < this.turns.length; i++) {
      const host = this.turns[i]!;
      if ((this.hostInFlight.get(host) ?? 0) >= this.limits.perHost) continue;
      const list = this.byHost.get(host)!;
      const at = list.findIndex((q) => (this.inFlight.get(q.d.endpointId) ?? 0) < this.limits.perEndpoint);
      if (at < 0) continue;
      const [q] = list.splice(at, 1);
      // This host goes to the back of the turns: the others are served before it again.
      this.turns.splice(i, 1);
      if (list.length > 0) this.turns.push(host);
      else this.byHost.delete(host);
      this.queued--;
      bump(this.inFlight, q!.d.endpointId, 1);
      bump(this.hostInFlight, host, 1);
      this.sending++;
      return q!.d;
    }
    return undefined;
  }

  /** Its HTTP exchange is over (a failure: and recorded): the slot, and its endpoint's and host's share, are free. */
  release(d: ClaimedDelivery): void {
    bump(this.inFlight, d.endpointId, -1);
    bump(this.hostInFlight, d.hostId, -1);
    this.sending--;
    this.unclaimed(d);
  }

  private unclaimed(d: ClaimedDelivery): void {
    bump(this.claimedByEndpoint, d.endpointId, -1);
    bump(this.claimedByHost, d.hostId, -1);
  }

  /** Takes out the queued deliveries that match (to give back to the table): no longer counted as claimed. */
  remove(match: (q: Queued) => boolean): ClaimedDelivery[] {
    const out: ClaimedDelivery[] = [];
    for (const [host, list] of this.byHost) {
      const kept = list.filter((q) => !match(q) || (out.push(q.d), false));
      if (kept.length > 0) this.byHost.set(host, kept);
      else this.byHost.delete(host);
    }
    this.turns = this.turns.filter((h) => this.byHost.has(h));
    for (const d of out) this.unclaimed(d);
    this.queued -= out.length;
    return out;
  }

  /** Queued deliveries that may no longer start (their lease would end during the attempt). */
  expired(now: number): ClaimedDelivery[] {
    return this.queued === 0 ? [] : this.remove((q) => q.startBy < now);
  }

  /** Deliveries a claim may take now: the free slots, and the next round beyond them. */
  claimRoom(): number {
    return this.limits.slots * this.limits.claimAhead - this.sending - this.queued;
  }
}
