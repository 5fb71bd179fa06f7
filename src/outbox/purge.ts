import type pg from 'pg';
import type { Db } from '../db/client.ts';
import { execute, executorOf, statement, type Executor } from './executor.ts';
import {
  dayOf,
  dropExpiredOutboxPartitions,
  settleDetachedOutboxDays,
  type DetachedDaysResult,
  type DroppedPartition,
} from './partitions.ts';

/*
 * Housekeeping's fallback, for the stragglers of a day: DONE rows past the retention in a partition
 * that could not be dropped whole (src/outbox/partitions.ts), because it also holds a DEAD letter,
 * a message still retrying or one that finished late. They are deleted in bounded batches: one
 * DELETE of a million rows would hold its locks and bloat WAL in one go, while batches of
 * `batchSize` keep each statement short and let the worker (and the API) carry on between them.
 *
 * `created_at < start of the cutoff's day` is exactly "in a partition whose whole day is past the
 * retention" (partitions are whole UTC days), and it lets the planner skip every newer partition:
 * rows of days still within the retention wait for their partition to be dropped rather than
 * being deleted one by one. The inner select walks those days' primary keys in id order (the
 * order they were written: oldest day first), keeping the DONE rows past the cutoff; a straggler
 * day is nearly all such rows, so a batch reads about as many rows as it deletes, and the entries
 * of rows already deleted are skipped once marked dead. (It walked a B-tree over processed_at
 * until that became a BRIN index, migration 0002, which gives no order.) SKIP LOCKED lets two
 * workers purge at the same time without waiting on each other.
 * PENDING and DEAD rows are never touched: DEAD letters stay until someone replays or deletes them.
 */
const DELETE_BATCH = statement(
  'outbox-purge-done-batch',
  `delete from outbox
    where id in (select id from outbox
                  where status = 'DONE' and processed_at < $1::timestamptz
                    and created_at < $2::timestamptz
                  order by id
                  limit $3
                    for update skip locked)
      and created_at < $2::timestamptz`,
);

export function purgeDoneBatch(db: Db, retentionDays: number, batchSize = 1000, now = new Date()): Promise<number> {
  return deleteDoneBatch(executorOf(db), retentionDays, batchSize, now);
}

async function deleteDoneBatch(q: Executor, retentionDays: number, batchSize: number, now = new Date()): Promise<number> {
  const cutoff = new Date(now.getTime() - retentionDays * 24 * 3600 * 1000);
  const res = await execute(q, DELETE_BATCH, [cutoff.toISOString(), dayOf(cutoff).toISOString(), batchSize]);
  return res.rowCount ?? 0;
}

type PurgeDoneOptions = { retentionDays: number; batchSize?: number; maxBatches?: number; now?: Date; stopping?: () => boolean };

/** Deletes every straggler (above) past the retention, batch after batch. Returns how many went. */
export function purgeDone(db: Db, opts: PurgeDoneOptions): Promise<number> {
  return deleteDone(executorOf(db), opts);
}

async function deleteDone(q: Executor, opts: PurgeDoneOptions): Promise<number> {
  const batchSize = opts.batchSize ?? 1000;
  let total = 0;
  for (let i = 0; i < (opts.maxBatches ?? Infinity) && !opts.stopping?.(); i++) {
    const n = await deleteDoneBatch(q, opts.retentionDays, batchSize, opts.now);
    total += n;
    if (n < batchSize) break;
  }
  return total;
}

/** What one purge removed: whole partitions (and the rows they held), then stragglers row by row. */
export interface PurgeResult {
  /** Days dropped whole: partitions past the retention, and detached days whose drop was interrupted. */
  partitions: DroppedPartition[];
  /** Rows gone: those of the dropped partitions and the stragglers deleted. */
  rows: number;
  /** Detached days given back to the outbox, and those left with the reason (src/outbox/partitions.ts). */
  detached: Pick<DetachedDaysResult, 'reattached' | 'stuck'>;
}

/**
 * The outbox's purge: every partition the retention has passed over whose rows are all DONE goes
 * whole (src/outbox/partitions.ts), then the DONE rows left in older partitions go in batches.
 * Last, days left detached by an interrupted drop are dropped, or given back to the outbox if they
 * still hold messages it owes (settleDetachedOutboxDays). What the worker's housekeeping runs, and
 * `npm run outbox:purge`.
 */
export function purgeOutbox(db: Db, opts: PurgeOutboxOptions): Promise<PurgeResult> {
  return purgeOutboxOn(executorOf(db), opts);
}

type PurgeOutboxOptions = { retentionDays: number; batchSize?: number; now?: Date; stopping?: () => boolean };

/** purgeOutbox on the pool behind the application's database (the housekeeping's round). */
export async function purgeOutboxOn(pool: pg.Pool, opts: PurgeOutboxOptions): Promise<PurgeResult> {
  const partitions = await dropExpiredOutboxPartitions(pool, opts);
  const stragglers = await deleteDone(pool, opts);
  const { dropped, ...detached } = await settleDetachedOutboxDays(pool, opts);
  partitions.push(...dropped);
  return { partitions, rows: partitions.reduce((n, p) => n + p.rows, stragglers), detached };
}
