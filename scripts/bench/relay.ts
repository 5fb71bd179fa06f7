import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { loadConfig, type Config } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import type { TopicHandler } from '../../src/messages/handler.ts';
import { HandlerRegistry } from '../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../src/worker/outbox-worker.ts';
import { payloadAsRelayed } from '../../src/events/relay.ts';
import { desiredStream } from '../../src/events/stream.ts';
import { HEADERS, publicBody, SCHEMA_VERSIONS, subjectFor } from '../../src/events/subjects.ts';
import { eventsRelayHandlers } from '../../src/worker/handlers/events-relay.ts';
import { startNatsCluster, startNatsServer } from '../lib/nats.ts';
import { withClient } from '../lib/postgres.ts';
import { runIfEntry } from './lib/cli.ts';
import { emptyOutbox, insertPayloads } from './lib/outbox.ts';
import { mm, n, targetLines, x } from './lib/markdown.ts';
import { measureEach, round, runsOf, type Repeated } from './lib/stats.ts';
import type { BenchContext, PartOf, Drain } from './context.ts';

/*
 * Relay throughput: a backlog of COUNT booking.created messages, committed before the clock
 * starts, drained by the worker (in-process createConfiguredWorker, batch 500, concurrency 32, as the drain
 * bench) whose only handler is
 *   - relay: the events relay, publishing each into JetStream and awaiting its PubAck, or
 *   - noop:  does nothing (the outbox's own cost: claim + settle),
 * against a nats-server started here (scripts/lib/nats.ts: file storage, its own store
 * directory). Beside it, the relay floor (`relayFloor`): the same COUNT messages (subject,
 * headers, body, Nats-Msg-Id as the relay builds them) published by a bare JetStream client into a stream with the relay's settings, with
 * the relay's concurrency (RELAY_CONCURRENCY publishes in flight, each awaiting its PubAck): what
 * JetStream itself accepts on this machine. The section reports relay / floor (target ≥ 0.8).
 *
 * `relayDrain` and `relayFloor` are one measurement each (the `relay` section below calls them
 * with a fresh database and a fresh nats-server each time); `benchRelay` is all three
 * in one go on one database, for this file's command line and its smoke test:
 *
 *   node --import tsx scripts/bench/relay.ts --database-url postgres://… [--count 20000]
 *
 * The database must be migrated; its outbox is truncated before each measurement.
 */

/** Handlers in flight in the relay's worker, and publishes in flight in the floor. */
export const RELAY_CONCURRENCY = 32;

const payload = (i: number) => ({
  bookingId: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  propertyId: '11111111-1111-4111-8111-111111111111',
  propertyTitle: 'Bench flat',
  guestEmail: 'guest@bench.test',
  guestName: 'Guest',
  hostEmail: 'host@bench.test',
  hostName: 'Host',
  checkIn: '2027-01-01',
  checkOut: '2027-01-03',
  guests: 2,
  nights: 2,
  total: 24_000,
  currency: 'EUR',
  idempotencyKey: `bench-${i}`,
});

const fill = (url: string, count: number) =>
  withClient(url, async (c) => {
    await emptyOutbox(c);
    for (let i = 0; i < count; i += 5000) {
      const rows = Array.from({ length: Math.min(5000, count - i) }, (_, j) => JSON.stringify(payload(i + j)));
      await insertPayloads(c, 'booking.created', rows, 'bench-', i);
    }
  });

/** The relay's configuration for one measurement: a stream and subject prefix of its own, at `replicas`. */
function relayConfig(databaseUrl: string, natsUrl: string | undefined, replicas = 1): Config {
  const stream = `BENCH_${Date.now()}`;
  return loadConfig({
    DATABASE_URL: databaseUrl,
    ...(natsUrl ? { NATS_URL: natsUrl } : {}),
    EVENTS_STREAM: stream,
    EVENTS_SUBJECT_PREFIX: stream.toLowerCase(),
    EVENTS_TOPICS: 'booking.created',
    EVENTS_REPLICAS: String(replicas),
    LOG_LEVEL: 'warn',
  });
}

async function streamMessages(natsUrl: string, stream: string): Promise<number> {
  const nc = await connect({ servers: natsUrl.split(',').map((u) => u.replace('nats://', '')) });
  try {
    return (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
  } finally {
    await nc.close();
  }
}

/**
 * The relay floor: `count` booking.created events as the relay publishes them (src/events/
 * publisher.ts: subject, the five headers, the public body, Nats-Msg-Id a fresh uuid), built
 * before the clock starts, published by a bare client with RELAY_CONCURRENCY publishes in flight,
 * each awaiting its PubAck, into a stream created with the relay's settings (desiredStream: file
 * storage, the duplicate window). The clock runs from the first publish to the last PubAck.
 */
export async function relayFloor(opts: { databaseUrl: string; natsUrl: string; count: number }) {
  const config = relayConfig(opts.databaseUrl, opts.natsUrl);
  const subject = subjectFor(config.EVENTS_SUBJECT_PREFIX, 'booking.created');
  const occurredAt = new Date().toISOString();
  const events = Array.from({ length: opts.count }, (_, i) => {
    const id = randomUUID();
    const h = natsHeaders();
    h.set(HEADERS.topic, 'booking.created');
    h.set(HEADERS.key, `bench-${i + 1}`);
    h.set(HEADERS.outboxId, id);
    h.set(HEADERS.occurredAt, occurredAt);
    h.set(HEADERS.schemaVersion, String(SCHEMA_VERSIONS['booking.created']));
    const relayed = payloadAsRelayed('booking.created', payload(i));
    if ('error' in relayed) throw new Error(relayed.error);
    return { id, headers: h, body: JSON.stringify(publicBody(relayed.payload)) };
  });
  const nc = await connect({ servers: opts.natsUrl.replace('nats://', '') });
  try {
    await (await jetstreamManager(nc)).streams.add(desiredStream(config));
    const js = jetstream(nc, { timeout: config.EVENTS_PUBLISH_TIMEOUT_MS });
    let next = 0;
    const publisher = async () => {
      while (next < events.length) {
        const e = events[next++]!;
        await js.publish(subject, e.body, { msgID: e.id, headers: e.headers, timeout: config.EVENTS_PUBLISH_TIMEOUT_MS });
      }
    };
    const t0 = performance.now();
    await Promise.all(Array.from({ length: RELAY_CONCURRENCY }, publisher));
    const seconds = (performance.now() - t0) / 1000;
    return {
      seconds: Math.round(seconds * 100) / 100,
      perSecond: Math.round(opts.count / seconds),
      streamMessages: await streamMessages(opts.natsUrl, config.EVENTS_STREAM),
    };
  } finally {
    await nc.close();
  }
}

/**
 * One drain of a fresh backlog of `count` messages: `noop` (the outbox's own cost) or `relay`
 * (into JetStream at `natsUrl`, a stream of its own at `replicas`, 1 by default: 3 needs a
 * cluster, scripts/lib/nats.ts's startNatsCluster). The clock runs from the first claim to
 * nothing pending; the relay's connection and stream are set up before it starts.
 */
export async function relayDrain(
  opts:
    | { databaseUrl: string; count: number; handler: 'noop' }
    | { databaseUrl: string; count: number; handler: 'relay'; natsUrl: string; replicas?: number },
): Promise<{
  seconds: number;
  perSecond: number;
  /** relay: the messages the stream holds afterwards (every one relayed once: `count`). */
  streamMessages: number | null;
}> {
  const config =
    opts.handler === 'relay' ? relayConfig(opts.databaseUrl, opts.natsUrl, opts.replicas) : relayConfig(opts.databaseUrl, undefined);
  const stream = config.EVENTS_STREAM;
  const logger = pino({ level: 'warn' });
  const database = createDatabase(opts.databaseUrl, { max: 40, applicationName: 'bench-relay' });
  try {
    const handlers: TopicHandler<any>[] =
      opts.handler === 'relay'
        ? eventsRelayHandlers({ config, logger })
        : [{ name: 'bench.noop', topic: 'booking.created', handle: async () => {} }];
    await fill(opts.databaseUrl, opts.count);
    const registry = new HandlerRegistry(handlers);
    await registry.prepare();
    const worker = createConfiguredWorker({
      db: database.db,
      config,
      registry,
      logger,
      batchSize: 500,
      concurrency: RELAY_CONCURRENCY,
      listen: false,
      housekeeping: false,
    });
    const t0 = performance.now();
    await worker.runUntilEmpty();
    const seconds = (performance.now() - t0) / 1000;
    await worker.stop();
    await registry.close();
    const stored = opts.handler === 'relay' ? await streamMessages(opts.natsUrl, stream) : null;
    return { seconds: Math.round(seconds * 100) / 100, perSecond: Math.round(opts.count / seconds), streamMessages: stored };
  } finally {
    await database.close();
  }
}

export async function benchRelay(opts: { databaseUrl: string; count?: number; natsUrl?: string; log?: (l: string) => void }) {
  const count = opts.count ?? 20_000;
  const log = opts.log ?? (() => {});
  const nats = opts.natsUrl ? { url: opts.natsUrl, destroy: async () => {} } : await startNatsServer({ name: 'bench' });
  try {
    const { streamMessages: _none, ...noop } = await relayDrain({ databaseUrl: opts.databaseUrl, count, handler: 'noop' });
    log(`noop drain: ${noop.perSecond} msg/s`);
    const relayRun = await relayDrain({ databaseUrl: opts.databaseUrl, count, handler: 'relay', natsUrl: nats.url });
    log(`relay: ${relayRun.perSecond} msg/s, ${relayRun.streamMessages} in the stream`);
    const floor = await relayFloor({ databaseUrl: opts.databaseUrl, natsUrl: nats.url, count });
    log(`relay floor (bare JetStream client): ${floor.perSecond} msg/s, ${floor.streamMessages} in its stream`);
    return {
      count,
      noop,
      relay: { seconds: relayRun.seconds, perSecond: relayRun.perSecond, streamMessages: relayRun.streamMessages ?? 0 },
      floor,
      ratio: Math.round((relayRun.perSecond / floor.perSecond) * 100) / 100,
    };
  } finally {
    await nats.destroy();
  }
}

runIfEntry(
  import.meta.url,
  { command: 'bench relay', usage: 'usage: node --import tsx scripts/bench/relay.ts --database-url URL [--count N]' },
  (databaseUrl, flag) => benchRelay({ databaseUrl, count: Number(flag('count') ?? 20_000), log: (l) => process.stderr.write(`${l}\n`) }),
);

/** The events relay into JetStream against a bare JetStream client, and into a three-node cluster. */
export const relaySection = {
  name: 'relay',
  markdown: [{ place: 8, render: relayMarkdown }],
  run: async (ctx: BenchContext) => ({ relay: ctx.natsServer ? await measureRelay(ctx) : null }),
};

/** The relay, its floor and the relay at three replicas, runs interleaved; ratios of medians. */
async function measureRelay({ P, log, freshOurs }: BenchContext) {
  const count = P.relayMessages;
  // A run that lost or doubled messages is not measured, it is broken.
  const checked = (what: string, r: number, d: { perSecond: number; seconds: number; streamMessages: number | null }): Drain => {
    if (d.streamMessages !== count) throw new Error(`${what} run ${r + 1}: ${d.streamMessages} messages in the stream, ${count} published`);
    return { perSecond: d.perSecond, drainSeconds: d.seconds };
  };
  const relay = async (r: number) =>
    checked(
      'relay',
      r,
      await withNats(async (natsUrl) => relayDrain({ databaseUrl: await freshOurs(), count, handler: 'relay', natsUrl })),
    );
  const floor = async (r: number) =>
    checked('relay floor', r, await withNats(async (natsUrl) => relayFloor({ databaseUrl: await freshOurs(), natsUrl, count })));
  const replicated = async (r: number) =>
    checked('relay at 3 replicas', r, await replicatedDrain(await startNatsCluster({ name: 'bench', size: 3 }), freshOurs, count));
  // Each measurement on a fresh database and into a fresh nats-server (empty store).
  const configs = [
    { key: 'relay', label: 'relay into JetStream', measure: relay },
    { key: 'floor', label: `relay floor (bare JetStream client, ${RELAY_CONCURRENCY} in flight)`, measure: floor },
    { key: 'replicated', label: 'relay into a 3-node cluster, 3 replicas', measure: replicated },
  ] as const;
  const show = (d: Drain) => `${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`;
  const m = runsOf(await measureEach(P.runs, configs, { log, show }));
  const result = {
    messages: count,
    relay: m.relay,
    floor: m.floor,
    ratio: round(m.relay.median.perSecond / m.floor.median.perSecond, 3),
    replicated: m.replicated,
    replicatedRatio: round(m.replicated.median.perSecond / m.relay.median.perSecond, 3),
  };
  log(`   relay / relay floor: ${result.ratio}×; 3 replicas / 1: ${result.replicatedRatio}×`);
  return result;
}

async function withNats<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const nats = await startNatsServer({ name: 'bench' });
  try {
    return await fn(nats.url);
  } finally {
    await nats.destroy();
  }
}

/**
 * The same relay into a fresh three-node cluster, the stream at three replicas: each PubAck
 * waits for a majority of the replicas (in memory: Debian's 2.9 cannot fsync every write, so
 * this measures replication, not fsync).
 */
async function replicatedDrain(cluster: Awaited<ReturnType<typeof startNatsCluster>>, freshOurs: () => Promise<string>, count: number) {
  try {
    await cluster.waitForPlacement(3);
    return await relayDrain({ databaseUrl: await freshOurs(), count, handler: 'relay', natsUrl: cluster.url, replicas: 3 });
  } finally {
    await cluster.destroy();
  }
}

function relayMarkdown(r: PartOf<typeof relaySection>): string[] {
  if (r.relay === undefined) return [];
  const L = [
    `## 8. Relaying the outbox into JetStream (${n(r.params.relayMessages)} booking.created messages, committed before the clock starts)`,
    '',
  ];
  if (!r.relay) return [...L, 'Not measured (nats-server not installed).', ''];
  const rl = r.relay;
  const row = (label: string, rep: Repeated<Drain>) =>
    L.push(`| ${label} | ${mm(rep, 'perSecond')} | ${mm(rep, 'drainSeconds', 2)} | ${rep.runs.map((v) => n(v.perSecond)).join(', ')} |`);
  L.push('| Configuration | Messages/s | Time (s) | Runs (msg/s) |', '|---|---:|---:|---|');
  row('events relay into JetStream (in-process worker, batch 500 / concurrency 32, PubAck awaited)', rl.relay);
  row('relay floor: the same messages from a bare JetStream client, 32 publishes in flight', rl.floor);
  if (rl.replicated)
    row(
      "events relay into a three-node cluster, the stream at three replicas (Debian's nats-server 2.9: no fsync per write)",
      rl.replicated,
    );
  L.push('', `Relay / relay floor (medians): ${x(rl.ratio)}.`, '');
  if (rl.replicatedRatio !== undefined) L.push(`Relay at three replicas / at one (medians): ${x(rl.replicatedRatio)}.`, '');
  targetLines(L, r.targets, 'Relay');
  return L;
}
