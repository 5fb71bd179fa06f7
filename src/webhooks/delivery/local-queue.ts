import type { ClaimedDelivery } from './claim.ts';

/** A claimed delivery waiting in the sender's local queue for a slot. */
export interface Queued {
  d: ClaimedDelivery;
  /** performance.now() past which it may not start: its lease no longer covers a whole attempt. */
  startBy: number;
  /** performance.now() before which it may not start: its place in its endpoint's rate schedule (claim.ts). */
  notBefore?: number;
  /**
   * 1000 / rate: starts of its endpoint in this process at least this far apart, besides the
   * schedule. Claims take varying times, so two claims' start times, each counted from its own
   * answer, can come closer than the schedule's; this keeps this process's starts to the rate.
   */
  gapMs?: number;
}

export interface SlotLimits {
  /** WEBHOOK_CONCURRENCY: attempts in their HTTP exchange at once. */
  slots: number;
  /** WEBHOOK_ENDPOINT_CONCURRENCY and WEBHOOK_HOST_CONCURRENCY: in flight per endpoint, per host. */
  perEndpoint: number;
  perHost: number;
  /** How many times its slots the sender may hold claimed, in flight and queued (slots.ts CLAIM_AHEAD). */
  claimAhead: number;
  /**
   * WEBHOOK_IDLE_OWNER_SLOTS: slots only an owner with nothing in flight may take, so that a quiet
   * owner's delivery starts at once while other owners' hanging endpoints hold the rest (0: none).
   */
  idleOwnerSlots?: number;
}

/** Who holds the slots, for the worker's metrics: counts, never owner ids (src/metrics/worker-metrics.ts). */
export interface SlotStats {
  slots: number;
  inFlight: number;
  queued: number;
  /** Owners with an attempt in flight; of them, those at WEBHOOK_HOST_CONCURRENCY. */
  ownersInFlight: number;
  ownersAtCap: number;
  /** Owners with a delivery queued and none of theirs in flight: waiting for a first slot. */
  ownersWaiting: number;
  /** Slots held by the owners holding the most, largest first (at most five). */
  topOwners: number[];
  /** How long the longest-waiting queued delivery has been due, ms (0 when none is queued). */
  longestQueuedMs: number;
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
 *   - owners (the host accounts that own the endpoints) share the slots fairly: `next` serves,
 *     among the owners that may start something, the one with the fewest attempts in flight, and
 *     among those the one served longest ago (turns), oldest due first within an owner; so a slot
 *     that frees goes to an owner waiting for its first attempt before anyone's second;
 *   - the last `idleOwnerSlots` free slots are kept for owners with nothing in flight: owners whose
 *     endpoints hang cannot fill them, and a quiet owner's first attempt starts at once instead of
 *     after the others' timeouts (docs/adr/0040-webhook-slots-fair-between-owners.md);
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
  /** Queued deliveries with a start time (a rated endpoint's): only then is the queue scanned for the next one due. */
  private paced = 0;
  /** When each rated endpoint last started an attempt here (performance.now()). */
  private readonly lastStart = new Map<number, number>();

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
      if (q.notBefore !== undefined) this.paced++;
      bump(this.claimedByEndpoint, q.d.endpointId, 1);
      bump(this.claimedByHost, q.d.hostId, 1);
    }
  }

  /** The next delivery that may start now, marked in flight; undefined when none may. */
  next(now = performance.now()): ClaimedDelivery | undefined {
    const free = this.limits.slots - this.sending;
    if (free <= 0) return undefined;
    const reserved = Math.min(this.limits.idleOwnerSlots ?? 0, this.limits.slots - 1);
    let best = -1;
    let bestAt = -1;
    let bestHeld = Infinity;
    for (let i = 0; i < this.turns.length; i++) {
      const host = this.turns[i]!;
      const held = this.hostInFlight.get(host) ?? 0;
      // Fewest in flight first: an owner already holding as few as the best found cannot do better.
      if (held >= bestHeld || held >= this.limits.perHost) continue;
      if (held > 0 && free <= reserved) continue; // the reserved slots are for owners with nothing in flight
      const at = this.byHost
        .get(host)!
        .findIndex(
          (q) =>
            (this.inFlight.get(q.d.endpointId) ?? 0) < this.limits.perEndpoint && (q.notBefore === undefined || this.startAt(q) <= now),
        );
      if (at < 0) continue;
      best = i;
      bestAt = at;
      bestHeld = held;
      if (held === 0) break;
    }
    if (best < 0) return undefined;
    const host = this.turns[best]!;
    const list = this.byHost.get(host)!;
    const [q] = list.splice(bestAt, 1);
    // This owner goes to the back of the turns: the others are served before it again.
    this.turns.splice(best, 1);
    if (list.length > 0) this.turns.push(host);
    else this.byHost.delete(host);
    this.queued--;
    if (q!.notBefore !== undefined) {
      this.paced--;
      this.lastStart.set(q!.d.endpointId, now);
      if (this.paced === 0) this.forgetStarts(now);
    }
    bump(this.inFlight, q!.d.endpointId, 1);
    bump(this.hostInFlight, host, 1);
    this.sending++;
    return q!.d;
  }

  /** Who holds the slots now (metrics). */
  stats(now = Date.now()): SlotStats {
    const held = [...this.hostInFlight.values()].sort((a, b) => b - a);
    let waiting = 0;
    let oldestDue = Infinity;
    for (const [host, list] of this.byHost) {
      if (!this.hostInFlight.has(host)) waiting++;
      for (const q of list) oldestDue = Math.min(oldestDue, q.d.dueAt);
    }
    return {
      slots: this.limits.slots,
      inFlight: this.sending,
      queued: this.queued,
      ownersInFlight: held.length,
      ownersAtCap: held.filter((n) => n >= this.limits.perHost).length,
      ownersWaiting: waiting,
      topOwners: held.slice(0, 5),
      longestQueuedMs: oldestDue === Infinity ? 0 : Math.max(0, now - oldestDue),
    };
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
      const kept: Queued[] = [];
      for (const q of list) {
        if (!match(q)) kept.push(q);
        else {
          out.push(q.d);
          if (q.notBefore !== undefined) this.paced--;
        }
      }
      if (kept.length > 0) this.byHost.set(host, kept);
      else this.byHost.delete(host);
    }
    this.turns = this.turns.filter((h) => this.byHost.has(h));
    for (const d of out) this.unclaimed(d);
    this.queued -= out.length;
    if (this.paced === 0) this.forgetStarts(performance.now());
    return out;
  }

  /** The earliest start time still ahead among the queued deliveries (performance.now()), or undefined. */
  nextStartAt(now: number): number | undefined {
    if (this.paced === 0) return undefined;
    let earliest: number | undefined;
    for (const list of this.byHost.values()) {
      for (const q of list) {
        if (q.notBefore === undefined) continue;
        const at = this.startAt(q);
        if (at > now && (earliest === undefined || at < earliest)) earliest = at;
      }
    }
    return earliest;
  }

  /** The earliest a paced delivery may start: its place in the schedule, and its endpoint's gap since its last start here. */
  private startAt(q: Queued): number {
    const last = this.lastStart.get(q.d.endpointId);
    return last === undefined ? q.notBefore! : Math.max(q.notBefore!, last + q.gapMs!);
  }

  /** A start a second ago constrains nothing (a gap is at most a second): only recent ones are kept. */
  private forgetStarts(now: number): void {
    for (const [endpoint, at] of this.lastStart) if (now - at >= 1000) this.lastStart.delete(endpoint);
  }

  /** Queued deliveries that may no longer start (their lease would end during the attempt). */
  expired(now: number): ClaimedDelivery[] {
    return this.queued === 0 ? [] : this.remove((q) => q.startBy < now);
  }

  /** Deliveries a claim may take now: the free slots, and the next round beyond them. */
  claimRoom(): number {
    return this.limits.slots * this.limits.claimAhead - this.sending - this.queued;
  }

  /**
   * First deliveries of owners holding nothing claimed that a claim may take even when claimRoom()
   * is spent: other owners' backlogs fill the claim-ahead room, and a quiet owner's delivery must
   * still reach the queue to take a reserved slot. Bounded at one more round of slots.
   */
  newcomerRoom(): number {
    return Math.min(this.limits.slots, this.limits.slots * (this.limits.claimAhead + 1) - this.sending - this.queued);
  }
}
