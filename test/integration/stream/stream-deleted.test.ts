import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { jetstream, StorageType } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import pino from 'pino';
import { loadConfig, type Config } from '../../../src/config.ts';
import { runGroup, type GroupRunner } from '../../../src/events/consumer.ts';
import { ensureGroup, type GroupOptions } from '../../../src/events/group.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { createConsumerMetrics } from '../../../src/events/lag.ts';
import { serveMetrics } from '../../../src/metrics/metrics-server.ts';
import { createJetStreamPublisher, type OutgoingEvent } from '../../../src/events/publisher.ts';
import { desiredStream, ensureStream } from '../../../src/events/stream.ts';
import { daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { waitFor } from '../../helpers/wait.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The stream (or a group's durable consumer) deleted while the relay and the consumers run: the
 * relay recreates the stream on its next publish, a consumer recreates its group (and the stream),
 * and what cannot be recreated stops the process naming why, with a metric and an alert for a
 * group that is gone. DEBUG_EVENTS=1 shows the worker's and the consumer's logs.
 *
 * Slow (about 28 s alone): each deletion is answered by real processes noticing it and recreating
 * what was deleted, on their own timers.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip, { client: true });
let stream = 'D';
beforeEach(() => {
  stream = freshStream('D');
});

const prefix = () => stream.toLowerCase();
const env = (extra: Record<string, string> = {}) =>
  eventsEnv(t.db.url, nats.url, stream, {
    EVENTS_ACK_WAIT_SECONDS: '1',
    LOG_LEVEL: process.env.DEBUG_EVENTS ? 'debug' : 'warn',
    ...extra,
  });
const config = (extra: Record<string, string> = {}): Config => loadConfig(env(extra));

const event = (n: number, topic = 'booking.created'): OutgoingEvent => ({
  subject: `${prefix()}.${topic}`,
  messageId: `${stream}-${topic}-${n}`,
  topic,
  key: `k-${n}`,
  occurredAt: new Date(),
  schemaVersion: 1,
  body: { n },
});

async function publishRaw(n: number) {
  const h = headers();
  h.set('StayHub-Topic', 'booking.created');
  return jetstream(nats.nc).publish(`${prefix()}.booking.created`, JSON.stringify({ n }), { msgID: `${stream}-raw-${n}`, headers: h });
}

describe.skipIf(skip)('the relay, when the stream is deleted under it', () => {
  it('recreates the stream with its own configuration on the next publish, which succeeds', async () => {
    const cfg = config({ EVENTS_DUPLICATE_WINDOW_SECONDS: '2778' });
    const { logger, entries } = captureLogger();
    const publisher = createJetStreamPublisher(cfg, logger);
    try {
      await publisher.prepare();
      await publisher.publish(event(1));
      await nats.jsm.streams.delete(stream);
      const result = await publisher.publish(event(2));
      expect(result).toMatchObject({ duplicate: false, seq: 1 });
      const info = await nats.jsm.streams.info(stream);
      const want = desiredStream(cfg);
      expect(info.config).toMatchObject({
        subjects: want.subjects,
        storage: StorageType.File,
        max_age: want.max_age,
        duplicate_window: 2778 * 1e9,
      });
      expect((await readStream(nats.url, stream)).map((e) => e.msgId)).toEqual([`${stream}-booking.created-2`]);
      expect(entries().some((e) => e.level === 50 && /stream .* (is gone|missing).* recreat/i.test(String(e.msg)))).toBe(true);
    } finally {
      await publisher.close();
    }
  });

  it('gives the stream its subjects back when they were changed under it, saying so at error level', async () => {
    const cfg = config();
    const { logger, entries } = captureLogger();
    const publisher = createJetStreamPublisher(cfg, logger);
    try {
      await publisher.prepare();
      await publisher.publish(event(1));
      await nats.jsm.streams.update(stream, {
        ...(await nats.jsm.streams.info(stream)).config,
        subjects: [`${stream.toLowerCase()}-elsewhere.>`],
      });
      const result = await publisher.publish(event(2));
      expect(result).toMatchObject({ duplicate: false, seq: 2 });
      expect((await nats.jsm.streams.info(stream)).config.subjects).toEqual(desiredStream(cfg).subjects);
      expect(entries().some((e) => e.level === 50 && /no longer holds .*; bringing its subjects back/.test(String(e.msg)))).toBe(true);
    } finally {
      await publisher.close();
    }
  });

  it('fails the publish saying the stream is missing and why it cannot be recreated, never "jetstream is not enabled"', async () => {
    const cfg = config();
    const publisher = createJetStreamPublisher(cfg, pino({ level: 'silent' }));
    try {
      await publisher.prepare();
      await nats.jsm.streams.delete(stream);
      // Another stream takes part of our subjects: ours cannot come back, and property events have no stream.
      await nats.jsm.streams.add({ name: `${stream}_OTHER`, subjects: [`${prefix()}.booking.created`] });
      const error = await publisher.publish(event(3, 'property.changed')).then(
        () => null,
        (e: unknown) => e as Error,
      );
      expect(error).toBeInstanceOf(Error);
      expect(error!.message).not.toMatch(/jetstream is not enabled/i);
      expect(error!.message).toMatch(new RegExp(`stream ${stream} .*missing`));
      expect(error!.message).toMatch(/overlap/);
    } finally {
      await publisher.close();
      await nats.jsm.streams.delete(`${stream}_OTHER`).catch(() => undefined);
    }
  });
});

describe.skipIf(skip)('a running consumer group, when its durable or the stream is deleted', () => {
  const groupOptions = (): GroupOptions => ({
    stream,
    group: 'g',
    filterSubject: `${prefix()}.>`,
    ackWaitSeconds: 1,
    maxDeliver: 3,
    batchSize: 10,
  });
  const applied: string[] = [];
  /** The group on the test's connection, applying into `applied` unless `extra` says otherwise. */
  const run = (extra: Partial<Parameters<typeof runGroup>[0]> = {}): Promise<GroupRunner> =>
    runGroup({
      ...groupOptions(),
      nc: nats.nc,
      db: t.db.db,
      log: pino({ level: 'silent' }),
      handle: async (_tx, e) => {
        applied.push(e.messageId);
      },
      ...extra,
    });

  it('recreates its deleted durable and goes on with the next events', async () => {
    await ensureStream(nats.jsm, desiredStream(config()));
    await ensureGroup(nats.jsm, groupOptions());
    const runner = await run();
    try {
      await publishRaw(1);
      await waitFor(async () => applied.includes(`${stream}-raw-1`), 10_000, 'first event applied');
      await nats.jsm.consumers.delete(stream, 'g');
      await waitFor(async () => (await nats.jsm.consumers.info(stream, 'g').catch(() => null)) !== null, 15_000, 'durable recreated');
      await publishRaw(2);
      await waitFor(async () => applied.includes(`${stream}-raw-2`), 15_000, 'event after the deletion applied');
      // From the start of the stream again: the inbox skipped the event already applied.
      expect(applied.filter((id) => id === `${stream}-raw-1`)).toHaveLength(1);
    } finally {
      await runner.stop();
    }
  }, 60_000);

  it('recreates a deleted stream as it was (the relay’s window, not its own) and its durable, and goes on', async () => {
    await ensureStream(nats.jsm, desiredStream(config({ EVENTS_DUPLICATE_WINDOW_SECONDS: '2778' })), { role: 'relay' });
    await ensureGroup(nats.jsm, groupOptions());
    const runner = await run();
    try {
      await publishRaw(3);
      await waitFor(async () => applied.includes(`${stream}-raw-3`), 10_000, 'first event applied');
      await nats.jsm.streams.delete(stream);
      await waitFor(
        async () => (await nats.jsm.consumers.info(stream, 'g').catch(() => null)) !== null,
        15_000,
        'stream and durable recreated',
      );
      expect((await nats.jsm.streams.info(stream)).config.duplicate_window).toBe(2778 * 1e9);
      await publishRaw(4);
      await waitFor(async () => applied.includes(`${stream}-raw-4`), 15_000, 'event after the deletion applied');
    } finally {
      await runner.stop();
    }
  }, 60_000);

  it('calls onGroupLost once the stream is back, before the group reads again, when events it had not acked went with the stream', async () => {
    await ensureStream(nats.jsm, desiredStream(config()), { role: 'relay' });
    await ensureGroup(nats.jsm, groupOptions());
    const order: string[] = [];
    let hold = true;
    const runner = await run({
      // Behind: the event is delivered but not acked while the stream is deleted.
      handle: async (_tx, e) => {
        if (hold) throw new Error('not yet');
        order.push(`applied ${e.messageId}`);
      },
      onGroupLost: async (why) => {
        order.push(`lost: ${why}`);
      },
    });
    try {
      await publishRaw(5);
      await waitFor(
        async () => ((await nats.jsm.consumers.info(stream, 'g').catch(() => null))?.num_ack_pending ?? 0) > 0,
        10_000,
        'event delivered, not acked',
      );
      await nats.jsm.streams.delete(stream);
      await waitFor(async () => order.length > 0, 15_000, 'the loss reported');
      hold = false;
      await publishRaw(6);
      await waitFor(async () => order.includes(`applied ${stream}-raw-6`), 15_000, 'event after the deletion applied');
      expect(order).toEqual(['lost: stream deleted', `applied ${stream}-raw-6`]);
    } finally {
      await runner.stop();
    }
  }, 60_000);

  it('recreates the group again when the stream is deleted once more while it does so', async () => {
    await ensureStream(nats.jsm, desiredStream(config()), { role: 'relay' });
    await ensureGroup(nats.jsm, groupOptions());
    const lost: string[] = [];
    const runner = await run({
      // Between the stream's recreation and the durable's: deleted again, the first time.
      onGroupLost: async (why) => {
        lost.push(why);
        if (lost.length === 1) await nats.jsm.streams.delete(stream);
      },
    });
    let ended: unknown = 'running';
    void runner.done.then(
      () => (ended = 'ended'),
      (err: unknown) => (ended = err),
    );
    try {
      await publishRaw(8);
      await waitFor(async () => applied.includes(`${stream}-raw-8`), 10_000, 'first event applied');
      await nats.jsm.streams.delete(stream);
      await waitFor(async () => lost.length === 2, 20_000, 'the group recreated a second time');
      await publishRaw(9);
      await waitFor(async () => applied.includes(`${stream}-raw-9`), 15_000, 'event after both deletions applied');
      // Not GroupGoneError ("cannot be recreated: stream not found"), which ends the process.
      expect(ended).toBe('running');
      expect(lost).toEqual(['stream deleted', 'stream deleted']);
    } finally {
      await runner.stop();
    }
  }, 60_000);

  it('recreates a stream deleted before it first read it, from the settings its caller declared', async () => {
    // The earnings process declares the stream, then starts the group: a deletion between the two
    // left the group with no settings of its own to recreate it from.
    const declared = await ensureStream(nats.jsm, desiredStream(config({ EVENTS_DUPLICATE_WINDOW_SECONDS: '2779' })), { role: 'relay' });
    await nats.jsm.streams.delete(stream);
    const runner = await run({ streamAtStart: declared.config });
    let ended: unknown = 'running';
    void runner.done.then(
      () => (ended = 'ended'),
      (err: unknown) => (ended = err),
    );
    try {
      await waitFor(
        async () => (await nats.jsm.consumers.info(stream, 'g').catch(() => null)) !== null,
        15_000,
        'stream and durable recreated',
      );
      expect((await nats.jsm.streams.info(stream)).config.duplicate_window).toBe(2779 * 1e9);
      await publishRaw(7);
      await waitFor(async () => applied.includes(`${stream}-raw-7`), 15_000, 'event after the deletion applied');
      expect(ended).toBe('running');
    } finally {
      await runner.stop();
    }
  }, 60_000);

  it('the consumer process exits non-zero naming why when its group cannot be recreated', async () => {
    // Serving metrics, as deployed: the server must not keep the process up.
    const child = spawnProcess('src/commands/consume-earnings.ts', env({ EVENTS_METRICS_PORT: '0' }));
    try {
      // Pulling: the group runs.
      await waitFor(
        async () => ((await nats.jsm.consumers.info(stream, 'earnings').catch(() => null))?.num_waiting ?? 0) > 0,
        30_000,
        'consumer pulling',
      );
      // Sealed: JetStream cannot unseal it, so the group cannot come back on it.
      await nats.jsm.streams.update(stream, { ...(await nats.jsm.streams.info(stream)).config, sealed: true } as Parameters<
        typeof nats.jsm.streams.update
      >[1]);
      await nats.jsm.consumers.delete(stream, 'earnings');
      const code = await Promise.race([child.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 20_000))]);
      expect(code).toBe(1);
      expect(child.stderr()).toMatch(/earnings/);
      expect(child.stderr()).toMatch(/sealed: have true, want false/);
    } finally {
      await child.stop();
    }
  }, 60_000);

  it('reports stayhub_events_group_present 1, then 0 once its durable or the stream is gone', async () => {
    await ensureStream(nats.jsm, desiredStream(config()));
    await ensureGroup(nats.jsm, groupOptions());
    const metrics = createConsumerMetrics({ jsm: nats.jsm, stream, db: t.db.db, group: 'g' });
    const server = await serveMetrics(metrics.registry, 0, '127.0.0.1');
    const scrape = async () => {
      const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
      expect(res.status).toBe(200);
      return res.text();
    };
    try {
      expect(await scrape()).toMatch(/^stayhub_events_group_present\{group="g"\} 1$/m);
      await nats.jsm.consumers.delete(stream, 'g');
      expect(await scrape()).toMatch(/^stayhub_events_group_present\{group="g"\} 0$/m);
      await nats.jsm.streams.delete(stream);
      expect(await scrape()).toMatch(/^stayhub_events_group_present\{group="g"\} 0$/m);
    } finally {
      await server.close();
    }
  });
});

describe.skipIf(skip)('bookings, when the stream is deleted while the worker and the consumer run', () => {
  it('reach the recreated stream and the ledger; nothing goes DEAD', async () => {
    const book = await bookingsOfOneGuest();
    const outbox = async () => {
      const { rows } = await t.db.db.execute<{ status: string; n: number }>(
        sql`select status, count(*)::int as n from outbox group by status`,
      );
      return Object.fromEntries(rows.map((r) => [r.status, r.n]));
    };
    const caughtUp = async () => (await ledgerDifferences(t.db.db, 'earnings')).length === 0 && !(await outbox()).PENDING;

    const worker = spawnProcess('src/commands/drain-outbox.ts', env());
    const consumer = spawnConsumer();
    try {
      await book(3);
      await waitFor(caughtUp, 30_000, 'ledger caught up before the deletion');
      await nats.jsm.streams.delete(stream);
      await book(3);
      await waitFor(caughtUp, 30_000, 'ledger caught up after the deletion');
      expect(await outbox()).toEqual({ DONE: expect.any(Number) });
      const inStream = (await readStream(nats.url, stream)).filter((e) => e.headers['StayHub-Topic'] === 'booking.created');
      expect(inStream).toHaveLength(3);
    } finally {
      await consumer.stop();
      await worker.stop();
    }
  }, 120_000);
});

describe.skipIf(skip)('a consumer that was down while the stream was deleted', () => {
  it('finds its ledger without a durable, rebuilds it from the bookings table, and loses no booking', async () => {
    const book = await bookingsOfOneGuest();
    const relayed = async () => {
      const { rows } = await t.db.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
      return rows[0]!.n === 0;
    };
    const inLedger = async () => (await ledgerDifferences(t.db.db, 'earnings')).length === 0;

    const worker = spawnProcess('src/commands/drain-outbox.ts', env());
    let consumer = spawnConsumer();
    try {
      await book(2);
      await waitFor(async () => (await relayed()) && (await inLedger()), 30_000, 'ledger caught up');
      await consumer.stop();
      // While the consumer is down: bookings the relay publishes, then the stream deleted with them unread.
      await book(3);
      await waitFor(relayed, 30_000, 'relayed while the consumer is down');
      await nats.jsm.streams.delete(stream);
      await book(1); // the relay recreates the stream: it starts at 1 again, as if nothing was lost
      await waitFor(relayed, 30_000, 'relayed into the recreated stream');
      expect((await readStream(nats.url, stream)).filter((e) => e.headers['StayHub-Topic'] === 'booking.created')).toHaveLength(1);

      consumer = spawnConsumer();
      await waitFor(inLedger, 30_000, 'every booking in the ledger');
      // Rebuilt, not read: every booking of the database is counted from the bookings table.
      const { rows } = await t.db.db.execute<{ rebuilt: number; bookings: number }>(
        sql`select (select count(*)::int from earnings_bookings where consumer_group = 'earnings' and counted_from = 'rebuild') as rebuilt,
                   (select count(*)::int from bookings) as bookings`,
      );
      expect(rows[0]!.rebuilt).toBe(rows[0]!.bookings);
    } finally {
      await consumer.stop();
      await worker.stop();
    }
  }, 120_000);
});

describe.skipIf(skip)('a consumer starting just as the stream is deleted', () => {
  it('opens it again and starts, its ledger rebuilt, instead of exiting 1 "stream not found"', async () => {
    const book = await bookingsOfOneGuest();
    const worker = spawnProcess('src/commands/drain-outbox.ts', env());
    try {
      await book(2);
      await waitFor(
        async () => {
          const { rows } = await t.db.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
          return rows[0]!.n === 0;
        },
        30_000,
        'relayed',
      );
      // A first run makes the group and its ledger, so the next start finds a ledger to position.
      const consume = (afterStreamOpened?: () => Promise<void>) =>
        earningsMain({ argv: ['--until-empty'], env: env(), out: () => {}, err: () => {}, exitOnForcedStop: false, afterStreamOpened });
      expect(await consume()).toBe(0);
      let deletes = 0;
      const code = await consume(async () => {
        // Between the stream's open and the group's position, once.
        if (deletes++ === 0) await nats.jsm.streams.delete(stream);
      });
      expect(deletes).toBe(2); // opened twice: the second time after the delete
      expect(code).toBe(0);
      expect(await ledgerDifferences(t.db.db, 'earnings')).toEqual([]);
    } finally {
      await worker.stop();
    }
  }, 120_000);
});

/** A host's property and a guest; `book(n)` makes n more two-night stays there, one after another. */
async function bookingsOfOneGuest(): Promise<(n: number) => Promise<void>> {
  const host = await signUp(t.app, 'host');
  const guest = await signUp(t.app, 'guest');
  const property = await listProperty(t.app, host, { currency: 'EUR', nightlyPrice: 1000 });
  let day = 10;
  return async (n) => {
    for (let i = 0; i < n; i++, day += 3) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/bookings',
        headers: guest.auth,
        payload: { propertyId: property.id, checkIn: daysFromNow(day), checkOut: daysFromNow(day + 2), guests: 1 },
      });
      expect(res.statusCode).toBe(201);
    }
  };
}

function spawnConsumer() {
  return spawnProcess('src/commands/consume-earnings.ts', env());
}

function spawnProcess(entry: string, envVars: Record<string, string>) {
  const { DATABASE_URL: _a, NATS_URL: _b, ...inherited } = process.env;
  const child: ChildProcess = spawn(process.execPath, entryArgs(entry), {
    cwd: ROOT,
    env: { ...inherited, ...envVars },
    stdio: ['ignore', process.env.DEBUG_EVENTS ? 'inherit' : 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return {
    exited,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
