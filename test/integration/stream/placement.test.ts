import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JetStreamApiError } from '@nats-io/jetstream';
import { EventsUnavailableError } from '../../../src/events/errors.ts';
import { NO_SUITABLE_PEERS } from '../../../src/events/connection.ts';
import { createJetStreamPublisher } from '../../../src/events/publisher.ts';
import {
  freshStream,
  outgoingEvent,
  placedOnAll,
  publisherConfig,
  skipWithoutNats,
  startNatsCluster,
  type NatsCluster,
} from '../../helpers/nats.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A relay starting while a three-node cluster has only two nodes up, and its stream is not yet
 * created at three replicas: JetStream answers "no suitable peers for placement". That is the
 * cluster short of a node, not the configuration wrong: the relay starts, its events wait in the outbox as while
 * NATS is away (no attempt spent), and the first publish after the node is back creates the stream
 * and stores the event.
 */

const skip = skipWithoutNats();
let cluster: NatsCluster | undefined;
beforeAll(async () => {
  if (skip) return;
  cluster = await startNatsCluster({ started: 2 });
}, 60_000);
afterAll(async () => {
  await cluster?.destroy();
});

describe.skipIf(skip)('a relay starting while the cluster is a node short of the replicas', () => {
  it('starts, holds its events as NATS away, and stores them once the node is back', async () => {
    const c = cluster!;
    const stream = freshStream('P');
    // A node short from the start: the leader has never heard of it, so it cannot place on it
    // (a node that was up and is killed is still placed on, and the stream runs on two).
    const short = await placedOnAll(c.jsm, 3).catch((err: unknown) => err);
    expect(short).toBeInstanceOf(JetStreamApiError);
    expect((short as JetStreamApiError).code).toBe(NO_SUITABLE_PEERS);

    const config = publisherConfig(c.url, stream, { EVENTS_REPLICAS: '3', EVENTS_PUBLISH_TIMEOUT_MS: '1000' });
    const { logger, entries } = captureLogger();
    const publisher = createJetStreamPublisher(config, logger);
    const event = outgoingEvent(stream);
    try {
      // Not "JetStream refused stream … as configured": that stops a worker at start.
      await expect(publisher.prepare()).resolves.toBeUndefined();
      expect(entries().some((e) => /fewer nodes up than EVENTS_REPLICAS/.test(String(e.msg)))).toBe(true);
      // Away, like a timeout: the outbox keeps the message without spending an attempt.
      await expect(publisher.publish(event)).rejects.toBeInstanceOf(EventsUnavailableError);

      await c.start(2);
      const stored = await waitFor(
        async () => {
          try {
            return await publisher.publish(event);
          } catch (err) {
            if (err instanceof EventsUnavailableError) return undefined;
            throw err;
          }
        },
        60_000,
        'the event stored once the node is back',
      );
      expect(stored).toEqual({ seq: 1, duplicate: false });
      const info = await c.jsm.streams.info(stream);
      expect(info.config.num_replicas).toBe(3);
      expect(info.state.messages).toBe(1);
    } finally {
      await publisher.close();
    }
  }, 150_000);
});
