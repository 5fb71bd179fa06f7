import type { Tx } from '../db/transaction.ts';
import * as outbox from '../outbox/index.ts';
import { priorityOf, TOPICS, type PayloadOf, type TopicName } from './topics.ts';

/*
 * The application's enqueue: the outbox's, typed by the topic catalogue (./topics.ts). A topic
 * the catalogue does not know is a compile error, its payload is validated against the topic's
 * schema (a bad one throws here, inside the caller's transaction, which then writes nothing), and
 * the topic's priority (TOPIC_PRIORITY) is written with it. Everything else, the caller's
 * transaction and the wake-up, is the outbox's (src/outbox/enqueue.ts).
 */

/** `key` orders a key's messages; `group` and `owner` make groups and owners take turns in the claim (src/outbox/enqueue.ts). */
export type TopicEnqueueOptions = Omit<outbox.EnqueueOptions, 'priority'>;

/** Writes an event of a known topic into the outbox, inside `tx`; never commits. */
export function enqueueTopic<T extends TopicName>(
  tx: Tx,
  topic: T,
  payload: PayloadOf<T>,
  opts: TopicEnqueueOptions = {},
): Promise<outbox.EnqueuedMessage> {
  return outbox.enqueue(tx, topic, snapshot(topic, payload), { ...opts, priority: priorityOf(topic) });
}

/** `enqueueTopic` folded into the business row's INSERT: both in one round trip (src/outbox/enqueue.ts). */
export function insertWithTopicEvent<T extends TopicName>(
  tx: Tx,
  insert: outbox.RowInsert,
  topic: T,
  payload: PayloadOf<T>,
  opts: TopicEnqueueOptions = {},
): Promise<Record<string, any> | undefined> {
  return outbox.insertWithEvent(tx, insert, topic, snapshot(topic, payload), { ...opts, priority: priorityOf(topic) });
}

/** The payload as its topic's schema parses it: what is stored (unknown fields dropped). */
function snapshot<T extends TopicName>(topic: T, payload: PayloadOf<T>): PayloadOf<T> {
  return TOPICS[topic].parse(payload) as PayloadOf<T>;
}
