import type { Db } from '../db/client.ts';
import { finishedPage, lastFinishedBefore, messagesById, type FinishedMessage, type MessageById } from '../outbox/index.ts';
import { RELAY_HANDLER as EVENTS_RELAY } from './relay.ts';

/*
 * What the outbox says the relay stored in the stream: the source of truth the stream is
 * reconciled with (reconcile.ts), and the proof that a stream was recreated after events were
 * relayed into an earlier one (the earnings replay refusal).
 *
 * An event counts as relayed when the outbox says the relay handler finished its message
 * (finishedPage and its siblings in src/outbox/: the relay's PubAck came back before the message
 * was DONE, so the event was stored at or before processed_at; a lane message's event id is its
 * original's). Those verbs own the SQL and the definition; this names the handler.
 */

/** A relayed event; messageId is its Nats-Msg-Id. */
export type RelayedRow = FinishedMessage;

/**
 * The next `limit` relayed events processed at or after `since` and before `until`, after the
 * cursor (day, id): by the day they were written, oldest first, in the order written inside a day.
 * A lane message and its original are both returned when both are DONE: the caller keys on messageId.
 */
export function relayedPage(
  db: Db,
  p: { since: Date; until: Date; after: { day: string; id: number } | null; limit: number },
): Promise<RelayedRow[]> {
  return finishedPage(db, { handler: EVENTS_RELAY, ...p });
}

/** What the relay needs to publish a row's event again. */
export type RelayedMessageRow = MessageById;

/** The rows behind `ids` (internal ids), with their payloads: only for the few found missing. */
export function relayedMessages(db: Db, ids: number[]): Promise<RelayedMessageRow[]> {
  return messagesById(db, ids);
}

/**
 * The last event the outbox says was relayed before `before`, or null. A stream created after
 * that moment cannot hold it (unless someone published it again): its history is not the whole
 * story.
 */
export function lastRelayedBefore(db: Db, before: Date): Promise<{ messageId: string; processedAt: Date } | null> {
  return lastFinishedBefore(db, EVENTS_RELAY, before);
}
