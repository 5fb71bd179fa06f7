import type { Config } from '../../config.ts';
import type { Logger } from '../../logger.ts';
import type { TopicHandler } from '../../messages/handler.ts';
import type { TopicName } from '../../messages/topics.ts';
import { DependencyUnavailableError } from '../../outbox/index.ts';
import { EventsUnavailableError } from '../../events/errors.ts';
import { createJetStreamPublisher, type EventPublisher } from '../../events/publisher.ts';
import { RELAY_HANDLER, relayedTopics, relayMessage } from '../../events/relay.ts';

export const EVENTS_RELAY = RELAY_HANDLER;

export interface EventsRelayDeps {
  config: Config;
  logger: Logger;
}

/**
 * The relay: for each relayed topic, a handler that publishes the event into JetStream and returns
 * only once the server has stored it (PubAck). It is an ordinary outbox handler, so retries with
 * backoff, DEAD letters, per-key order (a key's events are published one at a time, in order),
 * leases and the dashboard all apply to it.
 *
 * Effectively once into the log: the publish carries Nats-Msg-Id = the outbox message's public id.
 * If the worker dies after the PubAck and before recording DONE, the message is claimed again and
 * published again; the server, within its duplicate window (longer than the outbox's retry span,
 * src/events/stream.ts), answers "duplicate" and stores nothing. A duplicate is a success.
 *
 * The event itself (subject, headers, body) is built by src/events/relay.ts, which
 * `npm run events:backfill` shares.
 *
 * NATS down or hung: the publisher's circuit (src/events/circuit.ts) fails the publish at once, or
 * lets it go as soon as NATS is known to be away, with EventsUnavailableError. That is not the
 * message's fault, so the handler throws the outbox's DependencyUnavailableError: the message
 * waits for about as long as NATS has been away (capped by BACKOFF_MAX_SECONDS) without spending
 * an attempt, and an outage of a day leaves its events PENDING, never DEAD. A refused event (no
 * stream, a configuration the server rejects) is an ordinary failure and counts.
 *
 * The relay keeps its own lane (src/outbox/lanes.ts): its work of that message moves into a lane
 * message, while the message's emails and webhooks, and the key's later messages, go on. The key's
 * later events queue in the lane behind it, so the stream still receives them in order.
 */
export function eventsRelayHandlers(deps: EventsRelayDeps, publisher?: EventPublisher): TopicHandler<any>[] {
  const topics = relayedTopics(deps.config);
  const pub = publisher ?? createJetStreamPublisher(deps.config, deps.logger);
  let prepared: Promise<void> | undefined;
  let closed: Promise<void> | undefined;
  return topics.map((topic): TopicHandler<TopicName> => ({
    name: EVENTS_RELAY,
    topic,
    // NATS away must not hold the message's emails or a later message's (src/outbox/lanes.ts).
    ownLane: true,
    // Shared by every topic's handler: one connection, one stream check.
    prepare: () => (prepared ??= pub.prepare()),
    close: () => (closed ??= pub.close()),
    async handle({ messageId, topic: t, key, payload, log, occurredAt }) {
      let result;
      try {
        result = await relayMessage(pub, deps.config, { messageId, topic: t, key, occurredAt, payload });
      } catch (err) {
        if (!(err instanceof EventsUnavailableError)) throw err;
        throw new DependencyUnavailableError(err.message, { retryAfterSeconds: err.awaySeconds, cause: err });
      }
      if (result.duplicate) log.info({ seq: result.seq }, 'event was already in the stream (earlier attempt); counted as relayed');
      // `log` is a child logger made on first use: not for a line the level drops anyway.
      else if (deps.logger.isLevelEnabled('debug')) log.debug({ seq: result.seq }, 'event relayed');
    },
  }));
}
