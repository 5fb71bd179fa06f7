import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { realpathSync } from 'node:fs';
import pg from 'pg';
import pino from 'pino';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { createWorker, HandlerRegistry, type Handler } from '../../src/outbox/index.ts';
import { eventsRelayHandlers } from '../../src/worker/handlers/events-relay.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * Relay throughput: a backlog of COUNT booking.created messages, committed before the clock
 * starts, drained by the worker (in-process createWorker, batch 500, concurrency 32, as the drain
 * bench) whose only handler is
 *   - noop:  does nothing (the outbox's own cost: claim + settle), or
 *   - relay: the events relay, publishing each into JetStream and awaiting its PubAck,
 * against a nats-server started here (file storage, its own store directory). Reports messages/s
 * of each and relay / noop (target ≥ 0.5).
 *
 * `relayDrain` is one measurement (scripts/bench/run.ts's `relay` section calls it with a fresh
 * database each time, and a fresh nats-server for each relay run); `benchRelay` is both in one
 * go on one database, for this file's command line and its smoke test:
 *
 *   node --import tsx scripts/bench/relay.ts --database-url postgres://… [--count 20000]
 *
 * The database must be migrated; its outbox is truncated before each measurement.
 */

export interface RelayBenchResult {
  count: number;
  noop: { seconds: number; perSecond: number };
  relay: { seconds: number; perSecond: number; streamMessages: number };
  ratio: number;
}

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

async function fill(url: string, count: number) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('truncate outbox');
    for (let i = 0; i < count; i += 5000) {
      const n = Math.min(5000, count - i);
      const rows = Array.from({ length: n }, (_, j) => JSON.stringify(payload(i + j)));
      await c.query(
        `insert into outbox (topic, key, payload)
         select 'booking.created', 'bench-' || (n + $2), p::jsonb from unnest($1::text[]) with ordinality as x(p, n)`,
        [rows, i],
      );
    }
  } finally {
    await c.end();
  }
}

/** nats-server's version line, or null when it is not installed. */
export function natsServerVersion(): string | null {
  const r = spawnSync('nats-server', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

export const NATS_INSTALL_HINT =
  'nats-server was not found (on Debian/Ubuntu: apt-get install -y nats-server). The relay figures are skipped.';

/** A nats-server -js on a free port with a fresh store; stop() removes the store. */
export async function startNatsServer(): Promise<{ url: string; stop(): Promise<void> }> {
  if (natsServerVersion() === null) {
    throw new Error('nats-server not found (Debian: apt-get install -y nats-server)');
  }
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-nats-'));
  const child = spawn('nats-server', ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir], { stdio: 'ignore' });
  for (let i = 0; ; i++) {
    if (await portOpen(port)) break;
    if (i > 500) throw new Error('nats-server did not start');
    await sleep(20);
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * One drain of a fresh backlog of `count` messages: `noop` (the outbox's own cost) or `relay`
 * (into JetStream at `natsUrl`, a stream of its own). The clock runs from the first claim to
 * nothing pending; the relay's connection and stream are set up before it starts.
 */
export async function relayDrain(
  opts: { databaseUrl: string; count: number; handler: 'noop' } | { databaseUrl: string; count: number; handler: 'relay'; natsUrl: string },
): Promise<{
  seconds: number;
  perSecond: number;
  /** relay: the messages the stream holds afterwards (every one relayed once: `count`). */
  streamMessages: number | null;
}> {
  const stream = `BENCH_${Date.now()}`;
  const config = loadConfig({
    DATABASE_URL: opts.databaseUrl,
    ...(opts.handler === 'relay' ? { NATS_URL: opts.natsUrl } : {}),
    EVENTS_STREAM: stream,
    EVENTS_SUBJECT_PREFIX: stream.toLowerCase(),
    EVENTS_TOPICS: 'booking.created',
    LOG_LEVEL: 'warn',
  });
  const logger = pino({ level: 'warn' });
  const database = createDatabase(opts.databaseUrl, { max: 40, applicationName: 'bench-relay' });
  try {
    const handlers: Handler<any>[] =
      opts.handler === 'relay'
        ? eventsRelayHandlers({ config, logger })
        : [{ name: 'bench.noop', topic: 'booking.created', handle: async () => {} }];
    await fill(opts.databaseUrl, opts.count);
    const registry = new HandlerRegistry(handlers);
    await registry.prepare();
    const worker = createWorker({
      db: database.db,
      config,
      registry,
      logger,
      batchSize: 500,
      concurrency: 32,
      listen: false,
      housekeeping: false,
    });
    const t0 = performance.now();
    await worker.runUntilEmpty();
    const seconds = (performance.now() - t0) / 1000;
    await worker.stop();
    await registry.close();
    let streamMessages: number | null = null;
    if (opts.handler === 'relay') {
      const nc = await connect({ servers: opts.natsUrl.replace('nats://', '') });
      streamMessages = (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
      await nc.close();
    }
    return { seconds: Math.round(seconds * 100) / 100, perSecond: Math.round(opts.count / seconds), streamMessages };
  } finally {
    await database.close();
  }
}

export async function benchRelay(opts: {
  databaseUrl: string;
  count?: number;
  natsUrl?: string;
  log?: (l: string) => void;
}): Promise<RelayBenchResult> {
  const count = opts.count ?? 20_000;
  const log = opts.log ?? (() => {});
  const nats = opts.natsUrl ? { url: opts.natsUrl, stop: async () => {} } : await startNatsServer();
  try {
    const { streamMessages: _none, ...noop } = await relayDrain({ databaseUrl: opts.databaseUrl, count, handler: 'noop' });
    log(`noop drain: ${noop.perSecond} msg/s`);
    const relayRun = await relayDrain({ databaseUrl: opts.databaseUrl, count, handler: 'relay', natsUrl: nats.url });
    log(`relay: ${relayRun.perSecond} msg/s, ${relayRun.streamMessages} in the stream`);
    return {
      count,
      noop,
      relay: { seconds: relayRun.seconds, perSecond: relayRun.perSecond, streamMessages: relayRun.streamMessages ?? 0 },
      ratio: Math.round((relayRun.perSecond / noop.perSecond) * 100) / 100,
    };
  } finally {
    await nats.stop();
  }
}

function isEntry(): boolean {
  try {
    return !!process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href;
  } catch {
    return false;
  }
}

if (isEntry()) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const databaseUrl = arg('database-url') ?? process.env.DATABASE_URL;
  if (!databaseUrl) {
    process.stderr.write('usage: node --import tsx scripts/bench/relay.ts --database-url URL [--count N]\n');
    process.exit(2);
  }
  benchRelay({ databaseUrl, count: Number(arg('count') ?? 20_000), log: (l) => process.stderr.write(`${l}\n`) }).then(
    (r) => process.stdout.write(`${JSON.stringify(r)}\n`),
    (err) => {
      process.stderr.write(`bench relay: ${(err as Error).stack}\n`);
      process.exitCode = 1;
    },
  );
}
