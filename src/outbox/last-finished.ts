import type { Db } from '../db/client.ts';
import { executorOf, run, statement } from './executor.ts';
import { finishedBy } from './finished-by.ts';

/** $1 before, $2 the handler. */
const LAST_FINISHED = statement(
  'outbox-last-finished-before',
  `select coalesce(o.origin_id, o.public_id)::text as message_id,
          (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
     from outbox o
    where o.status = 'DONE'
      and o.processed_at < $1::timestamptz
      and ${finishedBy('$2')}
    order by o.processed_at desc
    limit 1`,
);

/**
 * The last message `handler` finished (finished-by.ts) processed before `before`, or null.
 * Walks outbox_done_processed_idx backwards from `before`: the first row that counts ends it.
 */
export async function lastFinishedBefore(db: Db, handler: string, before: Date): Promise<{ messageId: string; processedAt: Date } | null> {
  const [r] = await run<{ message_id: string; processed_ms: number }>(executorOf(db), LAST_FINISHED, [before.toISOString(), handler]);
  return r ? { messageId: r.message_id, processedAt: new Date(r.processed_ms) } : null;
}
