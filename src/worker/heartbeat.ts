import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import type { ClaimedMessage } from '../outbox/claim.ts';
import { extendLeases } from '../outbox/lease.ts';

/**
 * Keeps the leases of everything the worker has started alive: one timer for the whole worker
 * (not one per message), and one UPDATE per tick for every message held (src/outbox/lease.ts).
 *
 * The rule that keeps a message from running in two workers at once (issue 10):
 * - a message starts only with at least half its lease left (`canStart`; the loop hands back a
 *   prefetched message that waited longer than that instead of starting it);
 * - while anything is held, the heartbeat extends every held lease each quarter of a lease.
 * So a started message is extended at the latest a quarter of a lease after it started, while it
 * still has at least a quarter left: the extension always lands before the lease could end (unless
 * the database is unreachable for that long, and then the claim fence still keeps the row right).
 * The local deadline (`leaseUntilMs`) is counted from when the claim or extension was SENT, so it is
 * never later than the database's.
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private readonly leaseMs: number;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly leaseSeconds: number,
    /** Everything started and not yet settled. */
    private readonly held: Set<ClaimedMessage>,
  ) {
    this.leaseMs = leaseSeconds * 1000;
  }

  /** Whether enough of its lease is left to start this message now. */
  canStart(msg: ClaimedMessage, now: number): boolean {
    return msg.leaseUntilMs - now >= this.leaseMs / 2;
  }

  /** Call after adding to `held`: starts the timer if it is not running. */
  ensureRunning(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(this.tick, this.leaseMs / 4);
    this.timer.unref();
  }

  /** Call after removing from `held`: stops the timer when nothing is held. */
  maybeStop(): void {
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
    const sentAt = Date.now();
    let held: boolean[];
    try {
      held = await extendLeases(this.db, claims, this.leaseSeconds);
    } catch (err) {
      // The next tick tries again; the claim fence protects the outcome meanwhile.
      this.log.warn({ err: { message: (err as Error).message }, count: claims.length }, 'lease extension failed');
      return;
    }
    for (let i = 0; i < claims.length; i++) {
      const msg = claims[i]!;
      if (held[i]) msg.leaseUntilMs = sentAt + this.leaseMs;
      else if (this.held.has(msg)) this.log.warn({ messageId: msg.publicId }, 'lease could not be extended: the claim was superseded');
    }
  }
}
