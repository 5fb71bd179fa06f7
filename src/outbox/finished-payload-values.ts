import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { finishedBy } from './finished-by.ts';

export interface FinishedPayloadValuesQuery {
  handler: string;
  /** Only messages of these topics. */
  topics: readonly string[];
  /** The top-level payload field whose value is returned (as text). */
  field: string;
  /** processed_at in [since, until). */
  since: Date;
  until: Date;
}

/**
 * Each distinct (topic, payload field value) of the messages of `topics` that `handler` finished
 * (finished-by.ts), processed in [since, until): the facts a caller joins to its own tables, in its
 * own query. A message whose payload lacks the field is left out.
 *
 * A window over outbox_done_processed_idx; `distinct` because a lane message and its original may
 * both count, and a message may be relayed again.
 */
export async function finishedPayloadValues(db: Db, q: FinishedPayloadValuesQuery): Promise<{ topic: string; value: string }[]> {
  if (q.topics.length === 0) return [];
  const { rows } = await db.execute<{ topic: string; value: string }>(sql`
    select distinct o.topic, o.payload->>${q.field} as value
      from outbox o
     where o.status = 'DONE'
       and o.processed_at >= ${q.since.toISOString()}::timestamptz
       and o.processed_at < ${q.until.toISOString()}::timestamptz
       and o.topic = any(${sql.param([...q.topics])}::text[])
       and o.payload->>${q.field} is not null
       and ${finishedBy(q.handler)}`);
  return rows;
}
