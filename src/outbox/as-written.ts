import { run, statement, type Executor } from './executor.ts';
import { pendingRows } from './pending-rows.ts';

/*
 * Reads of the outbox as its producers wrote it, for audits and end-to-end checks (the chaos run's
 * judge): each message once, its handlers' lane work folded back into it. A handler's work moved
 * into its lane (lanes.ts) is a row of its own whose origin_id is the message; the message is not
 * settled while that work is not: it counts as PENDING or DEAD while its lane work is, with the
 * lane's error. These read whole tables: tools' queries, never the worker's or the API's.
 */

/** One message as written, its lane work folded in. */
export interface MessageAsWritten {
  publicId: string;
  topic: string;
  key: string | null;
  /** The worst of the message's own status and its lane work's: DEAD, then PENDING, then its own. */
  status: string;
  attempts: number;
  lastError: string | null;
  handlersDone: string[];
  /** Lane work of it still waits, or died there. */
  laneOpen: boolean;
  /** outbox.created_at, epoch ms. */
  createdMs: number;
}

const AS_WRITTEN = statement(
  'outbox-messages-as-written',
  `with lanes as (
       select origin_id, max(case status when 'DEAD' then 2 when 'PENDING' then 1 else 0 end) as worst,
              max(last_error) filter (where status <> 'DONE') as error
         from outbox where lane is not null group by origin_id)
     select o.public_id as "publicId", o.topic, o.key,
            case l.worst when 2 then 'DEAD' when 1 then 'PENDING' else o.status end as status,
            o.attempts, coalesce(l.error, o.last_error) as "lastError", o.handlers_done as "handlersDone",
            coalesce(l.worst, 0) > 0 as "laneOpen", (extract(epoch from o.created_at) * 1000)::float8 as "createdMs"
       from outbox o left join lanes l on l.origin_id = o.public_id
      where o.lane is null and ($1::text[] is null or o.topic = any($1))`,
);

/** Every message as written, or only those of `topics`. */
export function messagesAsWritten(q: Executor, topics?: readonly string[]): Promise<MessageAsWritten[]> {
  return run<MessageAsWritten>(q, AS_WRITTEN, [topics ?? null]);
}

const PENDING_OF_TOPICS = statement(
  'outbox-pending-of-topics',
  `select count(*)::int as pending, extract(epoch from now() - min(created_at))::float8 as age
     from ${pendingRows('o.created_at', 'o.topic = any($1)')} as pending`,
);

/** How many messages of `topics` are PENDING, and the age in seconds of the oldest (null: none). */
export async function pendingOfTopics(q: Executor, topics: readonly string[]): Promise<{ pending: number; age: number | null }> {
  const [row] = await run<{ pending: number; age: number | null }>(q, PENDING_OF_TOPICS, [topics]);
  return row!;
}

const SLOWEST = statement(
  'outbox-slowest-messages',
  `select topic, status, attempts, extract(epoch from processed_at - created_at)::float8 as seconds, created_at, last_error
     from outbox where processed_at is not null order by processed_at - created_at desc limit $1`,
);

/** The settled messages that took longest from their commit to DONE or DEAD. */
export function slowestMessages(q: Executor, limit: number) {
  return run<{
    topic: string;
    status: string;
    attempts: number;
    seconds: number;
    created_at: Date;
    last_error: string | null;
  }>(q, SLOWEST, [limit]);
}

const LATEST_OF_TOPIC = statement(
  'outbox-latest-of-topic',
  `select key, payload from outbox where topic = $1 and lane is null order by id desc limit $2`,
);

/** The latest messages of `topic` as written (key and payload), newest first. */
export function latestOfTopic(q: Executor, topic: string, limit: number): Promise<{ key: string; payload: Record<string, unknown> }[]> {
  return run<{ key: string; payload: Record<string, unknown> }>(q, LATEST_OF_TOPIC, [topic, limit]);
}
