import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
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

/**
 * The next `limit` messages `handler` finished, processed in [since, until), after the cursor
 * (processed_at, id), oldest first. A lane message and its original are both returned when both
 * count: the caller keys on messageId.
 *
 * Keyset pages over outbox_done_processed_idx: the outbox can hold millions of DONE rows, never
 * loaded at once; the row-value comparison keeps the page's start one index probe.
 */
export async function finishedPage(db: Db, p: FinishedPageQuery): Promise<FinishedMessage[]> {
  const after = p.after ? sql`and (o.processed_at, o.id) > (${p.after.processedCursor}::timestamptz, ${p.after.id})` : sql``;
  const { rows } = await db.execute<{
    id: string;
    message_id: string;
    created_ms: number;
    processed_ms: number;
    processed_text: string;
  }>(sql`
    select o.id, coalesce(o.origin_id, o.public_id)::text as message_id, o.processed_at::text as processed_text,
           (extract(epoch from o.created_at) * 1000)::float8 as created_ms,
           (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
      from outbox o
     where o.status = 'DONE'
       and o.processed_at >= ${p.since.toISOString()}::timestamptz
       and o.processed_at < ${p.until.toISOString()}::timestamptz
       ${after}
       and ${finishedBy(p.handler)}
     order by o.processed_at, o.id
     limit ${p.limit}`);
  return rows.map((r) => ({
    id: Number(r.id),
    messageId: r.message_id,
    createdAt: new Date(r.created_ms),
    processedAt: new Date(r.processed_ms),
    processedCursor: r.processed_text,
  }));
}
