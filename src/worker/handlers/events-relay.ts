import { sql } from 'drizzle-orm';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import { TOPIC_NAMES, isTopicName, type TopicName } from '../../outbox/topics.ts';
import { createJetStreamPublisher, type EventPublisher } from '../../events/publisher.ts';
import { SCHEMA_VERSIONS, publicBody, subjectFor } from '../../events/subjects.ts';
import type { Handler } from '../registry.ts';

export const EVENTS_RELAY = 'events.relay';

export interface EventsRelayDeps {
  config: Config;
  db: Db;
  logger: Logger;
}

/** EVENTS_TOPICS, or every topic when it is empty. A name that is not a topic is a configuration error. */
export function relayedTopics(config: Pick<Config, 'EVENTS_TOPICS'>): TopicName[] {
  if (config.EVENTS_TOPICS.length === 0) return [...TOPIC_NAMES];
  const unknown = config.EVENTS_TOPICS.filter((t) => !isTopicName(t));
  if (unknown.length) {
    throw new Error(`EVENTS_TOPICS names unknown topic(s) ${unknown.join(', ')}; known: ${TOPIC_NAMES.join(', ')}`);
  }
  return config.EVENTS_TOPICS as TopicName[];
}

/**
 * When each message was written (outbox.created_at), for the Occurred-At header, when the
 * dispatcher does not pass it (HandlerContext.occurredAt: the claim could return created_at and
 * save this read); the worker starts many handlers in the same tick after a claim,
 * and all lookups of one tick share one query instead of one round trip each.
 */
function occurredAtLoader(db: Db) {
  let waiting: Map<string, ((d: Date) => void)[]> | undefined;
  let failWaiting: ((err: unknown) => void)[] = [];
  const flush = async (batch: Map<string, ((d: Date) => void)[]>, fail: ((err: unknown) => void)[]) => {
    try {
      const { rows } = await db.execute<{ public_id: string; created_at: Date }>(
        sql`select public_id, created_at from outbox where public_id = any(${sql.param([...batch.keys()])}::uuid[])`,
      );
      const found = new Map(rows.map((r) => [r.public_id, new Date(r.created_at)]));
      // A row purged in between cannot be, as it is being handled; "now" would be the honest fallback.
      for (const [id, resolvers] of batch) for (const r of resolvers) r(found.get(id) ?? new Date());
    } catch (err) {
      for (const f of fail) f(err);
    }
  };
  return (publicId: string) =>
    new Promise<Date>((resolve, reject) => {
      if (!waiting) {
        const batch = (waiting = new Map());
        const fail = (failWaiting = []);
        setImmediate(() => {
          waiting = undefined;
          void flush(batch, fail);
        });
      }
      const list = waiting.get(publicId) ?? [];
      list.push(resolve);
      waiting.set(publicId, list);
      failWaiting.push(reject);
    });
}

/**
 * The relay: for each relayed topic, a handler that publishes the event into JetStream and returns
 * only once the server has stored it (PubAck). It is an ordinary outbox handler, so retries with
 * backoff, DEAD letters, per-key order (one message of a key in flight at a time, and the next is
 * not claimed before this one is DONE), leases and the dashboard all apply to it.
 *
 * Effectively once into the log: the publish carries Nats-Msg-Id = the outbox message's public id.
 * If the worker dies after the PubAck and before recording DONE, the message is claimed again and
 * published again; the server, within its duplicate window (longer than the outbox's retry span,
 * src/events/stream.ts), answers "duplicate" and stores nothing. A duplicate is a success.
 *
 * NATS down or slow: the publish times out (EVENTS_PUBLISH_TIMEOUT_MS), the handler throws, and
 * the message backs off like any failure.
 */
export function eventsRelayHandlers(deps: EventsRelayDeps, publisher?: EventPublisher): Handler<any>[] {
  const topics = relayedTopics(deps.config);
  const pub = publisher ?? createJetStreamPublisher(deps.config, deps.logger);
  const occurredAt = occurredAtLoader(deps.db);
  let prepared: Promise<void> | undefined;
  let closed: Promise<void> | undefined;
  return topics.map(
    (topic): Handler<TopicName> => ({
      name: EVENTS_RELAY,
      topic,
      // Shared by every topic's handler: one connection, one stream check.
      prepare: () => (prepared ??= pub.prepare()),
      close: () => (closed ??= pub.close()),
      async handle({ messageId, topic: t, key, payload, log, occurredAt: given }) {
        const result = await pub.publish({
          subject: subjectFor(deps.config.EVENTS_SUBJECT_PREFIX, t),
          messageId,
          topic: t,
          key,
          occurredAt: given ?? (await occurredAt(messageId)),
          schemaVersion: SCHEMA_VERSIONS[t],
          body: publicBody(payload),
        });
        if (result.duplicate) log.info({ seq: result.seq }, 'event was already in the stream (earlier attempt); counted as relayed');
        else log.debug({ seq: result.seq }, 'event relayed');
      },
    }),
  );
}
