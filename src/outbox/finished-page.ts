import type { Db } from '../db/client.ts';
import { executorOf, run, statement } from './executor.ts';
import { finishedBy } from './finished-by.ts';

/** A message a handler finished (finished-by.ts). */
export interface FinishedMessage {
  /** The row's internal id (the page cursor, and messagesById's argument). */
  id: number;
  /** The message's public id, or a lane message's original's: what the handler saw as messageId. */
  messageId: string;
  createdAt: Date;
  processedAt: Date;
  /** processed_at as PostgreSQL prints it, to the microsecond: the page cursor (a Date keeps milliseconds only). */
  processedCursor: string;
}

export interface FinishedPageQuery {
  handler: string;
  /** processed_at in [since, until). */
  since: Date;
  until: Date;
  /** The previous page's last row; null for the first page. */
  after: { processedCursor: string; id: number } | null;
  limit: number;
}

type FinishedRow = { id: string; message_id: string; created_ms: number; processed_ms: number; processed_text: string };

/** A page: $1 since, $2 until, $3 the handler, $4 the limit; after a cursor, $5 its processed_at and $6 its id. */
const page = (after: string) => `
    select o.id, coalesce(o.origin_id, o.public_id)::text as message_id, o.processed_at::text as processed_text,
           (extract(epoch from o.created_at) * 1000)::float8 as created_ms,
           (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
      from outbox o
     where o.status = 'DONE'
       and o.processed_at >= $1::timestamptz
       and o.processed_at < $2::timestamptz
       ${after}
       and ${finishedBy('$3')}
     order by o.processed_at, o.id
     limit $4`;

const FIRST_PAGE = statement('outbox-finished-page', page(''));
const PAGE_AFTER = statement('outbox-finished-page-after', page('and (o.processed_at, o.id) > ($5::timestamptz, $6)'));

/**
 * The next `limit` messages `handler` finished, processed in [since, until), after the cursor
 * (processed_at, id), oldest first. A lane message and its original are both returned when both
 * count: the caller keys on messageId.
 *
 * Keyset pages over outbox_done_processed_idx: the outbox can hold millions of DONE rows, never
 * loaded at once; the row-value comparison keeps the page's start one index probe.
 */
export async function finishedPage(db: Db, p: FinishedPageQuery): Promise<FinishedMessage[]> {
  const q = executorOf(db);
  const rows = p.after
    ? await run<FinishedRow>(q, PAGE_AFTER, [
        p.since.toISOString(),
        p.until.toISOString(),
        p.handler,
        p.limit,
        p.after.processedCursor,
        p.after.id,
      ])
    : await run<FinishedRow>(q, FIRST_PAGE, [p.since.toISOString(), p.until.toISOString(), p.handler, p.limit]);
  return rows.map((r) => ({
    id: Number(r.id),
    messageId: r.message_id,
    createdAt: new Date(r.created_ms),
    processedAt: new Date(r.processed_ms),
    processedCursor: r.processed_text,
  }));
}
