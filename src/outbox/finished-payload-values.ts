import type { Db } from '../db/client.ts';
import { executorOf, run, statement } from './executor.ts';
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

/** $1 the field, $2 since, $3 until, $4 the topics, $5 the handler. */
const FINISHED_PAYLOAD_VALUES = statement(
  'outbox-finished-payload-values',
  `select distinct o.topic, o.payload->>$1 as value
     from outbox o
    where o.status = 'DONE'
      and o.processed_at >= $2::timestamptz
      and o.processed_at < $3::timestamptz
      and o.created_at < $3::timestamptz
      and o.topic = any($4::text[])
      and o.payload->>$1 is not null
      and ${finishedBy('$5')}`,
);

/**
 * Each distinct (topic, payload field value) of the messages of `topics` that `handler` finished
 * (finished-by.ts), processed in [since, until): the facts a caller joins to its own tables, in its
 * own query. A message whose payload lacks the field is left out.
 *
 * A window of processed_at through its BRIN index (migration 0002): in each day, the pages whose
 * summaries meet the window, and no day that starts after `until` (processed_at is never before
 * created_at, so `created_at < until` holds for every row and prunes the days ahead). No order is
 * asked for, so nothing needed the B-tree's. `distinct` because a lane message and its original
 * may both count, and a message may be relayed again.
 */
export async function finishedPayloadValues(db: Db, q: FinishedPayloadValuesQuery): Promise<{ topic: string; value: string }[]> {
  if (q.topics.length === 0) return [];
  return run<{ topic: string; value: string }>(executorOf(db), FINISHED_PAYLOAD_VALUES, [
    q.field,
    q.since.toISOString(),
    q.until.toISOString(),
    [...q.topics],
    q.handler,
  ]);
}
