import { ConfigError, type Config } from '../config.ts';
import { TOPICS, TOPIC_NAMES, isTopicName, type TopicName } from '../messages/topics.ts';
import type { EventPublisher, PublishResult } from './publisher.ts';
import { SCHEMA_VERSIONS, publicBody, subjectFor } from './subjects.ts';

/*
 * What the relay makes of one outbox message, in one place. The worker's handler
 * (src/worker/handlers/events-relay.ts) runs it for each message it claims, and
 * `npm run events:backfill` (src/commands/events-backfill.ts) for messages already settled: the same message gives the
 * same subject, headers, body and Nats-Msg-Id either way, so the stream's deduplication sees one
 * event, whichever of the two published it first.
 */

/**
 * The relay handler's name, as the outbox records it in handlers_done and in a lane message's
 * `lane`: how the outbox tells which events the relay stored (reconcile-outbox.ts).
 */
export const RELAY_HANDLER = 'events.relay';

/** EVENTS_TOPICS, or every topic when it is empty. A name that is not a topic is a configuration error. */
export function relayedTopics(config: Pick<Config, 'EVENTS_TOPICS'>): TopicName[] {
  if (config.EVENTS_TOPICS.length === 0) return [...TOPIC_NAMES];
  const unknown = config.EVENTS_TOPICS.filter((t) => !isTopicName(t));
  if (unknown.length) {
    throw new ConfigError([`EVENTS_TOPICS: unknown topic(s) ${unknown.join(', ')}; known: ${TOPIC_NAMES.join(', ')}`]);
  }
  return config.EVENTS_TOPICS as TopicName[];
}

/** One outbox message on its way into the log. */
export interface RelayedMessage {
  /** The outbox message's public id: Nats-Msg-Id, the log's deduplication key. */
  messageId: string;
  topic: TopicName;
  key: string | null;
  /** outbox.created_at. */
  occurredAt: Date;
  /** The payload as the worker hands it to its handlers: parsed by the topic's schema (payloadAsRelayed). */
  payload: unknown;
}

/** Publishes one message; resolves once the log stored it, or reports that it already had it. */
export function relayMessage(
  publisher: EventPublisher,
  config: Pick<Config, 'EVENTS_SUBJECT_PREFIX'>,
  m: RelayedMessage,
): Promise<PublishResult> {
  return publisher.publish({
    subject: subjectFor(config.EVENTS_SUBJECT_PREFIX, m.topic),
    messageId: m.messageId,
    topic: m.topic,
    key: m.key,
    occurredAt: m.occurredAt,
    schemaVersion: SCHEMA_VERSIONS[m.topic],
    body: publicBody(m.payload),
  });
}

/**
 * A stored payload as the worker would hand it to the relay: parsed by its topic's schema, which
 * drops fields the schema does not name. `error` when it does not match: the worker dead-letters
 * such a message without running the relay, so it never reaches the log.
 */
export function payloadAsRelayed(topic: TopicName, stored: unknown): { payload: unknown } | { error: string } {
  const parsed = TOPICS[topic].safeParse(stored);
  if (parsed.success) return { payload: parsed.data };
  const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'} ${i.message}`).join('; ');
  return { error: `payload does not match the ${topic} schema: ${issues}` };
}
