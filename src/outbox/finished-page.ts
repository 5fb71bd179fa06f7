import type { Db } from '../db/client.ts';
import { executorOf, run, statement } from './executor.ts';
import { finishedBy } from './finished-by.ts';
import { listOutboxPartitions } from './partitions.ts';

/** A message a handler finished (finished-by.ts). */
export interface FinishedMessage {
  /** The row's internal id (with `day`, the page cursor; messagesById's argument). */
  id: number;
  /** The message's public id, or a lane message's original's: what the handler saw as messageId. */
  messageId: string;
  createdAt: Date;
  processedAt: Date;
  /** The start of the day partition that holds the row (ISO, or '-infinity' for the first, unbounded one). */
  day: string;
}

export interface FinishedPageQuery {
  handler: string;
  /** processed_at in [since, until). */
  since: Date;
  until: Date;
  /** The previous page's last row; null for the first page. */
  after: { day: string; id: number } | null;
  limit: number;
}

type FinishedRow = { id: string; message_id: string; created_ms: number; processed_ms: number };

/**
 * One day's rows of a page: $1 since, $2 until, $3 the handler, $4 the limit, $5 and $6 the day's
 * bounds; after the cursor, $7 its id.
 *
 * Why it is shaped so: the DONE rows' processed_at index is a BRIN index (migration 0002), which
 * finds the pages of a window and gives no order. The created_at bounds prune the statement to one
 * partition when it starts (parameters, never a value computed inside it). The rows of the window
 * are gathered first (materialized) and only then ordered by id, so the planner cannot turn the
 * read into a walk of the day's primary key in order that stops at the limit: a day entered from
 * its start has no condition on id at all, and its rows are found through the BRIN summaries, so
 * a day with nothing in the window costs those, not its heap. Only the cursor's own day, entered
 * again, has `id > $7`, which the primary key may serve: the rest of that day, no more.
 */
const dayPage = (after: string) => `
  with in_window as materialized (
     select o.id, coalesce(o.origin_id, o.public_id)::text as message_id,
            (extract(epoch from o.created_at) * 1000)::float8 as created_ms,
            (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
       from outbox o
      where o.created_at >= $5::timestamptz
        and o.created_at < $6::timestamptz
        ${after}
        and o.status = 'DONE'
        and o.processed_at >= $1::timestamptz
        and o.processed_at < $2::timestamptz
        and ${finishedBy('$3')})
   select id, message_id, created_ms, processed_ms from in_window order by id limit $4`;

const DAY_FROM_START = statement('outbox-finished-day-page', dayPage(''));
const DAY_AFTER = statement('outbox-finished-day-page-after', dayPage('and o.id > $7'));

/**
 * The next `limit` messages `handler` finished, processed in [since, until), after the cursor
 * (day, id): by day of created_at, oldest first, and in the order they were written inside a day.
 * A lane message and its original are both returned when both count: the caller keys on messageId.
 *
 * Keyset pages over the day partitions: the outbox can hold millions of DONE rows, never loaded at
 * once. Days from the cursor's on are read one at a time until the page is full; a day that starts
 * at or after `until` cannot hold a row processed before it (processed_at is never before
 * created_at), and a day the purge dropped between two pages is simply not there.
 */
export async function finishedPage(db: Db, p: FinishedPageQuery): Promise<FinishedMessage[]> {
  const q = executorOf(db);
  const after = p.after && { start: p.after.day === '-infinity' ? -Infinity : Date.parse(p.after.day), id: p.after.id };
  const page: FinishedMessage[] = [];
  for (const part of await listOutboxPartitions(q)) {
    const start = part.from?.getTime() ?? -Infinity;
    if (start >= p.until.getTime() || page.length >= p.limit) break;
    if (after && start < after.start) continue;
    const day = part.from?.toISOString() ?? '-infinity';
    const values = [p.since.toISOString(), p.until.toISOString(), p.handler, p.limit - page.length, day, part.to.toISOString()];
    const rows =
      after && start === after.start
        ? await run<FinishedRow>(q, DAY_AFTER, [...values, after.id])
        : await run<FinishedRow>(q, DAY_FROM_START, values);
    for (const r of rows) {
      page.push({
        id: Number(r.id),
        messageId: r.message_id,
        createdAt: new Date(r.created_ms),
        processedAt: new Date(r.processed_ms),
        day,
      });
    }
  }
  return page;
}
