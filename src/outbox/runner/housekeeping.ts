import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import type pg from 'pg';
import { executorOf } from '../executor.ts';
import { reattachPendingDetaches } from '../half-detached-days.ts';
import { ensureOutboxPartitions } from '../partitions.ts';
import { purgeOutboxOn } from '../purge.ts';

/*
 * The worker's housekeeping, every HOUSEKEEPING_INTERVAL_SECONDS (and once at start). The outbox
 * first: a day within the retention left half detached by an interrupted DETACH … CONCURRENTLY is
 * given back (src/outbox/half-detached-days.ts; one the purge meant to drop is the purge's to finish), its
 * partitions for the days ahead are made (a missing day among them too), the days whose
 * every message is DONE and older than OUTBOX_RETENTION_DAYS are dropped whole, and a day a crash
 * left detached is dropped or given back (src/outbox/partitions.ts). Then rows
 * that nobody will read again are deleted in bounded batches (1,000 rows a statement, each its
 * own short transaction, SKIP LOCKED so two workers never wait on each other), stopping between
 * two batches when the worker stops: the outbox's stragglers (src/outbox/purge.ts), and the
 * application's own chores (src/worker/chores.ts: expired idempotency keys, ended sessions).
 */

const BATCH = 1000;

/** A table the housekeeping keeps small: `deleteBatch` deletes at most `batchSize` rows and says how many. */
export interface Chore {
  /** The key of its count in the round's result and log line. */
  name: string;
  deleteBatch(db: Db, batchSize: number): Promise<number>;
}

/**
 * Rows deleted per chore in one round. `outbox` is the DONE purge: the rows of the partitions
 * dropped (`outboxPartitionsDropped` of them) and the stragglers. `outboxPartitionsReattached`: days
 * found half detached and given back.
 */
export type HousekeepingCounts = Record<string, number> & {
  outbox: number;
  outboxPartitionsDropped: number;
  outboxPartitionsReattached: number;
};

/** How long giving a half-detached day back waits for older transactions: past it, the next round tries again. */
const REATTACH_LOCK_TIMEOUT_MS = 10_000;

/**
 * Gives back every day within the retention that an interrupted DETACH … CONCURRENTLY left marked;
 * its names, or none when it must wait for a transaction older than it (logged: the next round and
 * the next write that misses try again, and OutboxPartitionDetachPending fires meanwhile).
 */
async function reattachHalfDetachedDays(pool: pg.Pool, retentionDays: number, log?: Logger): Promise<string[]> {
  const cutoff = new Date(Date.now() - retentionDays * 86_400_000);
  try {
    const given = await reattachPendingDetaches(pool, { after: cutoff, lockTimeoutMs: REATTACH_LOCK_TIMEOUT_MS });
    if (given.length) {
      log?.warn(
        { tables: given },
        'outbox: days left half detached by an interrupted DETACH … CONCURRENTLY were given back to the outbox (FINALIZE, then ATTACH)',
      );
    }
    return given;
  } catch (err) {
    log?.warn({ err }, 'outbox: a day left half detached could not be given back yet (an older transaction holds it); will try again');
    return [];
  }
}

/** One round: the outbox, then each chore batch after batch until a batch comes back short, or `stopping()`. */
export async function housekeepOnce(
  db: Db,
  opts: { retentionDays: number; chores?: readonly Chore[]; stopping?: () => boolean; log?: Logger },
): Promise<HousekeepingCounts> {
  const stopping = opts.stopping ?? (() => false);
  // Before the days ahead: a marked day still counts as made, and no write can reach it.
  const pool = executorOf(db);
  const halfDetached = await reattachHalfDetachedDays(pool, opts.retentionDays, opts.log);
  await ensureOutboxPartitions(pool);
  const outbox = await purgeOutboxOn(pool, { retentionDays: opts.retentionDays, batchSize: BATCH, stopping });
  // A day the outbox cannot take back is left untouched, with its fix in the log, every round until someone acts.
  for (const { name, reason } of outbox.detached.stuck) opts.log?.warn({ table: name }, reason);
  const { reattached } = outbox.detached;
  if (reattached.length)
    opts.log?.warn({ tables: reattached }, 'outbox: detached days that still held messages were given back to the outbox');
  const counts: Record<string, number> = {
    outbox: outbox.rows,
    outboxPartitionsDropped: outbox.partitions.length,
    outboxPartitionsReattached: halfDetached.length,
  };
  for (const chore of opts.chores ?? []) {
    let total = 0;
    while (!stopping()) {
      const n = await chore.deleteBatch(db, BATCH);
      total += n;
      if (n < BATCH) break;
    }
    counts[chore.name] = total;
  }
  return counts as HousekeepingCounts;
}

/** The timer: first round at once, then every `intervalSeconds`; never two rounds at a time. */
export class Housekeeping {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly opts: {
      retentionDays: number;
      intervalSeconds: number;
      chores?: readonly Chore[];
      onPurged?: (counts: HousekeepingCounts) => void;
    },
  ) {}

  start(): void {
    this.schedule(0);
  }

  private schedule(delayMs: number) {
    this.timer = setTimeout(() => {
      this.running = this.round().finally(() => {
        this.running = undefined;
        if (!this.stopped) this.schedule(this.opts.intervalSeconds * 1000);
      });
    }, delayMs);
    this.timer.unref();
  }

  private async round(): Promise<void> {
    try {
      const counts = await housekeepOnce(this.db, {
        retentionDays: this.opts.retentionDays,
        chores: this.opts.chores,
        stopping: () => this.stopped,
        log: this.log,
      });
      this.opts.onPurged?.(counts);
      if (Object.values(counts).some((n) => n > 0)) {
        this.log.info({ ...counts, retentionDays: this.opts.retentionDays }, 'housekeeping deleted old rows');
      }
    } catch (err) {
      this.log.warn({ err }, 'housekeeping failed; will try again next time');
    }
  }

  /** Stops the timer and waits for a round in progress (it stops between two batches). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }
}
