import type { Config } from '../../config.ts';
import type { Logger } from '../../logger.ts';
import type { Handler, TopicName } from '../../outbox/index.ts';
import { createJetStreamPublisher, type EventPublisher } from '../../events/publisher.ts';
import { relayedTopics, relayMessage } from '../../events/relay.ts';

export const EVENTS_RELAY = 'events.relay';

export interface EventsRelayDeps {
  config: Config;
  logger: Logger;
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
 * The event itself (subject, headers, body) is built by src/events/relay.ts, which
 * `npm run events:backfill` shares.
 *
 * NATS down or slow: the publish times out (EVENTS_PUBLISH_TIMEOUT_MS), the handler throws, and
 * the message backs off like any failure.
 */
export function eventsRelayHandlers(deps: EventsRelayDeps, publisher?: EventPublisher): Handler<any>[] {
  const topics = relayedTopics(deps.config);
  const pub = publisher ?? createJetStreamPublisher(deps.config, deps.logger);
  let prepared: Promise<void> | undefined;
  let closed: Promise<void> | undefined;
  return topics.map((topic): Handler<TopicName> => ({
    name: EVENTS_RELAY,
    topic,
    // Shared by every topic's handler: one connection, one stream check.
    prepare: () => (prepared ??= pub.prepare()),
    close: () => (closed ??= pub.close()),
    async handle({ messageId, topic: t, key, payload, log, occurredAt }) {
      const result = await relayMessage(pub, deps.config, { messageId, topic: t, key, occurredAt, payload });
      if (result.duplicate) log.info({ seq: result.seq }, 'event was already in the stream (earlier attempt); counted as relayed');
      // `log` is a child logger made on first use: not for a line the level drops anyway.
      else if (deps.logger.isLevelEnabled('debug')) log.debug({ seq: result.seq }, 'event relayed');
    },
  }));
}
