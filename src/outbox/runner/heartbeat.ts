import type { Logger } from '../../logger.ts';
import type { ClaimedMessage } from '../claim.ts';

/**
 * Holds what the worker has started and keeps those leases alive: one timer for the whole worker
 * (not one per message), and one UPDATE per tick for every message held (src/outbox/lease.ts).
 *
 * The rule that keeps a message from running in two workers at once:
 * - a message starts only with at least half its lease left (`canStart`; the loop hands back a
 *   prefetched message that waited longer than that instead of starting it);
 * - while anything is held, the heartbeat extends every held lease each quarter of a lease.
 * So a started message is extended at the latest a quarter of a lease after it started, while it
 * still has at least a quarter left: the extension always lands before the lease could end (unless
 * the database is unreachable for that long, and then the claim fence still keeps the row right).
 * The claim's local deadline (ClaimedMessage.leaseUntilMs) is counted from when the claim was
 * SENT, so it is never later than the database's.
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private readonly leaseMs: number;
  /** Everything started and not yet settled. */
  private readonly held = new Set<ClaimedMessage>();

  constructor(
    /** Moves the leases of the claims forward; per claim, whether it was still held (src/outbox/lease.ts extendLeases). */
    private readonly extend: (claims: readonly ClaimedMessage[], leaseSeconds: number) => Promise<boolean[]>,
    private readonly log: Logger,
    private readonly leaseSeconds: number,
  ) {
    this.leaseMs = leaseSeconds * 1000;
  }

  /** How many messages are held. */
  get size(): number {
    return this.held.size;
  }

  /** Whether enough of its lease is left to start this message now. */
  canStart(msg: ClaimedMessage, now: number): boolean {
    return msg.leaseUntilMs - now >= this.leaseMs / 2;
  }

  /** The message has started: its lease is kept alive from now on. */
  hold(msg: ClaimedMessage): void {
    this.held.add(msg);
    if (this.timer !== undefined) return;
    this.timer = setInterval(this.tick, this.leaseMs / 4);
    this.timer.unref();
  }

  /** The message is settled (or given up on): no longer extended; the timer stops when nothing is held. */
  release(msg: ClaimedMessage): void {
    this.held.delete(msg);
    if (this.held.size === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    return this.beating ?? Promise.resolve();
  }

  private readonly tick = (): void => {
    if (this.beating || this.held.size === 0) return;
    this.beating = this.beat().finally(() => (this.beating = undefined));
  };

  private async beat(): Promise<void> {
    const claims = [...this.held];
    let held: boolean[];
    try {
      held = await this.extend(claims, this.leaseSeconds);
    } catch (err) {
      // The next tick tries again; the claim fence protects the outcome meanwhile.
      this.log.warn({ err, count: claims.length }, 'lease extension failed');
      return;
    }
    for (let i = 0; i < claims.length; i++) {
      const msg = claims[i]!;
      if (!held[i] && this.held.has(msg))
        this.log.warn({ messageId: msg.publicId }, 'lease could not be extended: the claim was superseded');
    }
  }
}
