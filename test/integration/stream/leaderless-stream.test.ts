import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { EventsUnavailableError } from '../../../src/events/errors.ts';
import { EventsStreamUnavailableError } from '../../../src/events/publish-failures.ts';
import { createJetStreamPublisher } from '../../../src/events/publisher.ts';
import { desiredStream } from '../../../src/events/stream.ts';
import { freshStream, outgoingEvent, publisherConfig, skipWithoutNats, startNats, type NatsServer } from '../../helpers/nats.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';

/*
 * A stream that JetStream answers for and nobody takes publishes on: its settings read and
 * declared again without an error, and every publish finds no responders. nats-server 2.9.10 did
 * that for about 90 s to a stream recreated while one of its nodes was down. Here a real
 * nats-server without JetStream carries a JetStream API that answers what such a stream answers
 * (its info, as the relay declares it) while nothing listens on its subjects. The relay must take
 * it for NATS away (the event waits, no attempt spent), not for a refusal of the event.
 */

const skip = skipWithoutNats();
let server: NatsServer | undefined;
let api: NatsConnection | undefined;
beforeAll(async () => {
  if (skip) return;
  server = await startNats({ jetstream: false });
  api = await connect({ servers: server.url.replace('nats://', '') });
});
afterAll(async () => {
  await api?.close();
  await server?.destroy();
});

/** Answers the JetStream API for `config` as a stream without a leader does; counts what was asked (with `extra` answers). */
function leaderlessStream(config: ReturnType<typeof desiredStream>, extra: Record<string, (subject: string) => unknown> = {}) {
  const asked: string[] = [];
  const answer = (subject: string, reply: (subject: string) => unknown) => {
    api!.subscribe(subject, {
      callback: (_err, m) => {
        asked.push(m.subject);
        m.respond(JSON.stringify(reply(m.subject)));
      },
    });
  };
  const zero = { memory: 0, storage: 0, streams: 1, consumers: 0 };
  answer('$JS.API.INFO', () => ({
    type: 'io.nats.jetstream.api.v1.account_info_response',
    ...zero,
    limits: { max_memory: -1, max_storage: -1, max_streams: -1, max_consumers: -1 },
    api: { total: 0, errors: 0 },
  }));
  answer(`$JS.API.STREAM.INFO.${config.name}`, () => ({
    type: 'io.nats.jetstream.api.v1.stream_info_response',
    config,
    created: new Date().toISOString(),
    state: {
      messages: 0,
      bytes: 0,
      first_seq: 0,
      first_ts: '0001-01-01T00:00:00Z',
      last_seq: 0,
      last_ts: '0001-01-01T00:00:00Z',
      consumer_count: 0,
    },
  }));
  for (const [subject, reply] of Object.entries(extra)) answer(subject, reply);
  return asked;
}

describe.skipIf(skip)('a stream JetStream answers for that takes no publish', () => {
  it('is NATS away for the relay: the event waits, and nothing is counted against it', async () => {
    const stream = freshStream('L');
    const config = publisherConfig(server!.url, stream, { EVENTS_PUBLISH_TIMEOUT_MS: '500' });
    const asked = leaderlessStream(desiredStream(config));
    await api!.flush();
    const { logger, entries } = captureLogger();
    const publisher = createJetStreamPublisher(config, logger);
    const event = outgoingEvent(stream);
    try {
      await publisher.prepare();
      const err = await publisher.publish(event).then(
        () => null,
        (e: unknown) => e,
      );
      // Away (the outbox keeps the message without an attempt), the cause the leaderless stream.
      expect(err).toBeInstanceOf(EventsUnavailableError);
      expect((err as Error).cause).toBeInstanceOf(EventsStreamUnavailableError);
      expect((err as Error).message).toMatch(/is declared with .*booking\.created, but nobody takes the event: the stream has no leader/);
      // It did look for the stream and declare it again before deciding (no "recreating": it exists).
      expect(asked.filter((s) => s === `$JS.API.STREAM.INFO.${stream}`).length).toBeGreaterThanOrEqual(3);
      expect(entries().some((e) => /holds .* but took no publish: between leaders; declaring it again/.test(String(e.msg)))).toBe(true);
      // A stream that holds our subjects is an election to wait out: nothing logged at error level.
      expect(entries().filter((e) => Number(e.level) >= 50)).toEqual([]);
      // And the circuit is open: the next publish is held at once as NATS away too.
      await expect(publisher.publish(outgoingEvent(stream, 2))).rejects.toBeInstanceOf(EventsUnavailableError);
    } finally {
      await publisher.close();
    }
  });

  it('asks the stream leader to step down once that outlasts an election, and relays when another leader takes over', async () => {
    const stream = freshStream('L');
    const config = publisherConfig(server!.url, stream, { EVENTS_PUBLISH_TIMEOUT_MS: '500' });
    const desired = desiredStream(config);
    let steppedDownAt: number | undefined;
    const asked = leaderlessStream(desired, {
      [`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`]: () => {
        steppedDownAt ??= Date.now();
        // The new leader listens on the stream's subjects and stores what is published.
        api!.subscribe(desired.subjects![0]!, {
          callback: (_err, m) => {
            m.respond(JSON.stringify({ stream, seq: 1, duplicate: false }));
          },
        });
        return { type: 'io.nats.jetstream.api.v1.stream_leader_stepdown_response', success: true };
      },
    });
    await api!.flush();
    const { logger, entries } = captureLogger();
    const publisher = createJetStreamPublisher(config, logger);
    const startedAt = Date.now();
    try {
      await publisher.prepare();
      let stored: { seq: number } | undefined;
      // As the outbox does: the event is tried again until it is stored (the circuit holds most tries at once).
      while (!stored && Date.now() - startedAt < 20_000) {
        stored = await publisher.publish(outgoingEvent(stream)).catch(() => undefined);
        if (!stored) await sleep(100);
      }
      expect(stored?.seq).toBe(1);
      // Asked once, and not before four publish timeouts of nobody taking the event (an election is left alone).
      expect(asked.filter((s) => s === `$JS.API.STREAM.LEADER.STEPDOWN.${stream}`)).toHaveLength(1);
      expect(steppedDownAt! - startedAt).toBeGreaterThanOrEqual(4 * 500);
      expect(entries().some((e) => /taken no publish for \d+ s: asking its leader to step down/.test(String(e.msg)))).toBe(true);
      // Declared again at most once per publish timeout while it lasted, not on every try.
      const declared = entries().filter((e) =>
        /holds .* but took no publish: between leaders; declaring it again/.test(String(e.msg)),
      ).length;
      expect(declared).toBeGreaterThanOrEqual(1);
      expect(declared).toBeLessThanOrEqual(Math.ceil((steppedDownAt! - startedAt) / 500) + 1);
    } finally {
      await publisher.close();
    }
  });
});
