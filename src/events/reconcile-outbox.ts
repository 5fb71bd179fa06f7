import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { RELAY_HANDLER as EVENTS_RELAY } from './relay.ts';

/*
 * What the outbox says the relay stored in the stream: the source of truth the stream is
 * reconciled with (reconcile.ts), and the proof that a stream was recreated after events were
 * relayed into an earlier one (the earnings replay refusal).
 *
 * An event counts as relayed when the relay handler succeeded on it and its message is DONE:
 * - a message as written (lane null) whose handlers_done names the relay: the relay's PubAck came
 *   back before DONE, so the event was stored at or before processed_at;
 * - a lane message of the relay (src/outbox/lanes.ts) that is DONE: the relay's work moved there
 *   after a failure. Its event id is its original's public id (origin_id).
 * An original whose relay work moved to a lane also names the relay in handlers_done, though
 * nothing was published for it: while that lane message is not DONE (PENDING or DEAD) the
 * original is left out. Those lane rows are few (live or dead ones only), each set read through
 * its own partial index (one of the PENDING ones, outbox_dead_idx).
 *
 * Walked by processed_at through outbox_done_processed_idx (DONE rows only, every partition), in
 * keyset pages: the outbox can hold millions of DONE rows, never loaded at once.
 */

export interface RelayedRow {
  /** The row's internal id (the page cursor, and the payload's lookup when it must be republished). */
  id: number;
  /** Nats-Msg-Id: the public id of the message, or of a lane message's original. */
  messageId: string;
  createdAt: Date;
  processedAt: Date;
  /** processed_at as PostgreSQL prints it, to the microsecond: the page cursor (a Date keeps milliseconds only). */
  processedCursor: string;
}

/** The outbox row `o` is a relayed event (above): its event was stored in the stream. */
export const RELAYED = sql`(o.lane = ${EVENTS_RELAY}
       or (o.lane is null and ${EVENTS_RELAY} = any(o.handlers_done)
           and o.public_id <> all(array(
                 select p.origin_id from outbox p where p.status = 'PENDING' and p.lane = ${EVENTS_RELAY} and p.origin_id is not null
                 union all
                 select d.origin_id from outbox d where d.status = 'DEAD' and d.lane = ${EVENTS_RELAY} and d.origin_id is not null))))`;

/**
 * The next `limit` relayed events processed at or after `since` and before `until`, after the
 * cursor (processed_at, id), oldest first. A lane message and its original are both returned when
 * both are DONE: the caller keys on messageId.
 */
export async function relayedPage(
  db: Db,
  p: { since: Date; until: Date; after: { processedCursor: string; id: number } | null; limit: number },
): Promise<RelayedRow[]> {
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
       and ${RELAYED}
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

/** What the relay needs to publish a row's event again. */
export interface RelayedMessageRow {
  id: number;
  messageId: string;
  topic: string;
  /** The key as written: a lane message's `<handler>@<key>` is given back its original key. */
  key: string | null;
  createdAt: Date;
  payload: unknown;
}

/** The rows behind `ids` (internal ids), with their payloads: only for the few found missing. */
export async function relayedMessages(db: Db, ids: number[]): Promise<RelayedMessageRow[]> {
  if (ids.length === 0) return [];
  const { rows } = await db.execute<{
    id: string;
    message_id: string;
    topic: string;
    key: string | null;
    lane: string | null;
    created_ms: number;
    payload: unknown;
  }>(sql`
    select id, coalesce(origin_id, public_id)::text as message_id, topic, key, lane,
           (extract(epoch from created_at) * 1000)::float8 as created_ms, payload
      from outbox
     where id = any(${sql.param(ids)}::bigint[])
     order by created_at, id`);
  return rows.map((r) => ({
    id: Number(r.id),
    messageId: r.message_id,
    topic: r.topic,
    key: r.lane !== null && r.key !== null ? r.key.slice(r.lane.length + 1) : r.key,
    createdAt: new Date(r.created_ms),
    payload: r.payload,
  }));
}

/**
 * The last event the outbox says was relayed before `before`, or null. A stream created after
 * that moment cannot hold it (unless someone published it again): its history is not the whole
 * story. Walks outbox_done_processed_idx backwards from `before`.
 */
export async function lastRelayedBefore(db: Db, before: Date): Promise<{ messageId: string; processedAt: Date } | null> {
  const { rows } = await db.execute<{ message_id: string; processed_ms: number }>(sql`
    select coalesce(o.origin_id, o.public_id)::text as message_id,
           (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
      from outbox o
     where o.status = 'DONE'
       and o.processed_at < ${before.toISOString()}::timestamptz
       and ${RELAYED}
     order by o.processed_at desc
     limit 1`);
  const r = rows[0];
  return r ? { messageId: r.message_id, processedAt: new Date(r.processed_ms) } : null;
}
