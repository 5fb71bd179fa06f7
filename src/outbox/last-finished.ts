import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { finishedBy } from './finished-by.ts';

/**
 * The last message `handler` finished (finished-by.ts) processed before `before`, or null.
 * Walks outbox_done_processed_idx backwards from `before`: the first row that counts ends it.
 */
export async function lastFinishedBefore(db: Db, handler: string, before: Date): Promise<{ messageId: string; processedAt: Date } | null> {
  const { rows } = await db.execute<{ message_id: string; processed_ms: number }>(sql`
    select coalesce(o.origin_id, o.public_id)::text as message_id,
           (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
      from outbox o
     where o.status = 'DONE'
       and o.processed_at < ${before.toISOString()}::timestamptz
       and ${finishedBy(handler)}
     order by o.processed_at desc
     limit 1`);
  const r = rows[0];
  return r ? { messageId: r.message_id, processedAt: new Date(r.processed_ms) } : null;
}
