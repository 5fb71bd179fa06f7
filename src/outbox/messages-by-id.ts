import type { Db } from '../db/client.ts';
import { executorOf, run, statement } from './executor.ts';
import { keyAsWritten } from './lanes.ts';

/** A message as its producer wrote it, found by its row's internal id. */
export interface MessageById {
  id: number;
  /** The message's public id, or a lane message's original's. */
  messageId: string;
  topic: string;
  /** The key as written: a lane message's key is given back its original's. */
  key: string | null;
  createdAt: Date;
  payload: unknown;
}

const BY_ID = statement(
  'outbox-messages-by-id',
  `select id, coalesce(origin_id, public_id)::text as message_id, topic, key, lane,
          (extract(epoch from created_at) * 1000)::float8 as created_ms, payload
     from outbox
    where id = any($1::bigint[])
    order by created_at, id`,
);

/**
 * The messages behind `ids` (internal ids, as finishedPage returns them), with their payloads,
 * oldest first. Meant for the few a caller found missing downstream: one probe of each
 * partition's primary key per id.
 */
export async function messagesById(db: Db, ids: readonly number[]): Promise<MessageById[]> {
  if (ids.length === 0) return [];
  const rows = await run<{
    id: string;
    message_id: string;
    topic: string;
    key: string | null;
    lane: string | null;
    created_ms: number;
    payload: unknown;
  }>(executorOf(db), BY_ID, [[...ids]]);
  return rows.map((r) => ({
    id: Number(r.id),
    messageId: r.message_id,
    topic: r.topic,
    key: keyAsWritten(r.key, r.lane),
    createdAt: new Date(r.created_ms),
    payload: r.payload,
  }));
}
