import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';

/*
 * Housekeeping: DONE rows are history nobody reads after a few days, and left alone they come to
 * outnumber the live rows by orders of magnitude. They are deleted in bounded batches: one DELETE
 * of a million rows would hold its locks and bloat WAL in one go, while batches of `batchSize`
 * keep each statement short and let the worker (and the API) carry on between them.
 *
 * The inner select walks outbox_done_processed_idx (processed_at) WHERE DONE; SKIP LOCKED lets two
 * workers purge at the same time without waiting on each other. PENDING and DEAD rows are never
 * touched: DEAD letters stay until someone replays or deletes them.
 */
export async function purgeDoneBatch(db: Db, retentionDays: number, batchSize = 1000): Promise<number> {
  const res = await db.execute(sql`
    delete from outbox
     where id in (select id from outbox
                   where status = 'DONE' and processed_at < now() - make_interval(days => ${retentionDays})
                   order by processed_at
                   limit ${batchSize}
                     for update skip locked)`);
  return res.rowCount ?? 0;
}

/** Deletes every DONE row older than the retention, batch after batch. Returns how many went. */
export async function purgeDone(db: Db, opts: { retentionDays: number; batchSize?: number; maxBatches?: number }): Promise<number> {
  const batchSize = opts.batchSize ?? 1000;
  let total = 0;
  for (let i = 0; i < (opts.maxBatches ?? Infinity); i++) {
    const n = await purgeDoneBatch(db, opts.retentionDays, batchSize);
    total += n;
    if (n < batchSize) break;
  }
  return total;
}
