/*
 * Which walk the idle worker's poll makes (./loop.ts untilDue, ADR 0059).
 *
 * The poll is there for what becomes due with no wake-up: a retry whose backoff ended, a
 * postponed message, lane work (all without a turn, found by the first walk alone, whose index
 * holds nothing else), and, among first deliveries, a message whose worker died when its lease
 * ends, or one committed by a producer that died before its wake-up. Only a full walk finds
 * those, and under a snapshot held open it passes every entry of every message finished since
 * the snapshot began: measured in the held-snapshot scenario, 1 ms before the hold, 8.6 ms at its
 * middle and 12 ms after four minutes, once a second. Messages committed while it runs wait for
 * it, and by the hold's end they were the slowest hundredth.
 *
 * So the poll walks both indexes only when the full walk's own cost allows: at most one
 * COST_SHARE-th of the time between two of them. While full walks take under 2 ms (no snapshot
 * held, no pile of blocked messages) that is every poll, as before; at 12 ms, every 6 s; never
 * less often than half a lease, nor than MAX_GAP_MS (or the poll, if longer): a dead worker's
 * messages wait at most half a lease more than they did. The polls between walk the first index
 * alone. The cost is the cheapest of the last three full walks that found nothing, so one walk
 * slowed by the machine does not space them out, nor do a new connection's first walks.
 */

/** A full walk takes at most this share of the time between two of them. */
const COST_SHARE = 500;
/** Full walks are never further apart than this, unless the poll itself is longer. */
const MAX_GAP_MS = 30_000;
/** The full walks whose cheapest sets the gap. */
const REMEMBERED = 3;

export class PollWalks {
  private lastFullAt = Number.NEGATIVE_INFINITY;
  private readonly costs: number[] = [];

  private readonly maxGapMs: number;

  constructor(
    private readonly pollMs: number,
    leaseSeconds: number,
  ) {
    this.maxGapMs = Math.min(MAX_GAP_MS, (leaseSeconds * 1000) / 2);
  }

  /**
   * A full walk was sent at `at` (epoch ms), took `ms` and claimed `found` messages. Only a walk
   * that found nothing tells what looking costs: leasing a batch costs more, and says nothing of
   * the entries passed.
   */
  walked(at: number, ms: number, found: number): void {
    this.lastFullAt = at;
    if (found > 0) return;
    this.costs.push(ms);
    if (this.costs.length > REMEMBERED) this.costs.shift();
  }

  /** How long after a full walk the poll makes the next one. */
  gapMs(): number {
    // Until three are known, none: a connection's first walks also make its plans and fill its caches.
    const cost = this.costs.length < REMEMBERED ? 0 : Math.min(...this.costs);
    return Math.max(this.pollMs, Math.min(COST_SHARE * cost, this.maxGapMs));
  }

  /** Whether the poll at `now` walks both indexes (true) or the first alone. */
  fullAt(now: number): boolean {
    return now - this.lastFullAt >= this.gapMs();
  }
}
