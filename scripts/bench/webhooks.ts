import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { loadConfig, type Config } from '../../src/config.ts';
import { createDatabase, type Database } from '../../src/db/client.ts';
import { createWebhookSender } from '../../src/webhooks/delivery/sender.ts';
import { recordBookingEvent } from '../../src/webhooks/fan-out.ts';
import { newSecret } from '../../src/webhooks/secret.ts';
import { startNodeProcess } from '../lib/processes.ts';
import { startWebhookReceiver } from '../lib/webhook-receiver.ts';
import { runIfEntry } from './lib/cli.ts';
import { postmasterOf, serverCpuMicros } from './lib/cpu.ts';
import { mm, n, targetLines, x } from './lib/markdown.ts';
import { percentile, repeatOf, round, type Repeated } from './lib/stats.ts';
import type { BenchContext, PartOf } from './context.ts';
import type { drainSection } from './sections/drain.ts';

/*
 * Webhooks, two figures:
 *   - throughput: COUNT deliveries, written before the clock starts, sent by the worker's webhook
 *     sender (its defaults: 32 in flight, 4 per endpoint, 8 per host) to ENDPOINTS endpoints of one
 *     local receiver that answers 204 at once (in a process of its own, as a receiver is);
 *     deliveries/s from the first claim to the last recorded attempt, one sender process. Two
 *     ways in the same run: kept-alive connections (the default) and a new connection per attempt
 *     (WEBHOOK_KEEP_ALIVE=false, the sender before keep-alive). Compared with our no-op outbox drain (the run's `drain` section) as a ratio:
 *     the cost of an HTTP POST, its signature and its recorded attempt over a bare outbox message.
 *   - isolation: a healthy endpoint's delivery latency (booking event recorded → request received),
 *     p50/p99 over RATE events a second for SECONDS, once alone and once beside an endpoint of the
 *     same host that never answers (WEBHOOK_TIMEOUT_MS 15 s) with a backlog of BACKLOG deliveries
 *     already due. Target: p99 beside the hanging endpoint ≤ 1.2× p99 alone.
 *
 *   node --import tsx scripts/bench/webhooks.ts --database-url postgres://… [--count 5000]
 *
 * The database must be migrated; the webhook tables are emptied before each measurement.
 */

export function benchConfig(databaseUrl: string, env: Record<string, string> = {}): Config {
  return loadConfig({ DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', ...env });
}

async function reset(db: Database): Promise<{ hostId: string; propertyId: string }> {
  await db.pool.query('truncate webhook_attempts, webhook_deliveries, webhook_events, webhook_endpoints');
  const { rows: users } = await db.pool.query<{ id: string }>(
    `insert into users (email, name, role, password_hash) values ($1, 'Bench Host', 'host', 'x') returning id`,
    [`bench-host-${randomUUID()}@bench.test`],
  );
  const { rows: props } = await db.pool.query<{ public_id: string }>(
    `insert into properties (host_id, title, city, country, nightly_price, max_guests)
     values ($1, 'Bench flat', 'Porto', 'PT', 10000, 4) returning public_id`,
    [users[0]!.id],
  );
  return { hostId: users[0]!.id, propertyId: props[0]!.public_id };
}

async function addEndpoint(db: Database, hostId: string, url: string): Promise<string> {
  const { rows } = await db.pool.query<{ id: string }>(
    `insert into webhook_endpoints (host_id, url, event_types, secret, created_at)
     values ($1, $2, '{booking.created,booking.cancelled}', $3, now() - interval '1 hour') returning id`,
    [hostId, url, newSecret()],
  );
  return rows[0]!.id;
}

const payload = (propertyId: string) => {
  const bookingId = randomUUID();
  return {
    bookingId,
    propertyId,
    propertyTitle: 'Bench flat',
    guestEmail: 'guest@bench.test',
    guestName: 'Bench Guest',
    hostEmail: 'host@bench.test',
    hostName: 'Bench Host',
    checkIn: '2027-01-04',
    checkOut: '2027-01-07',
    guests: 2,
    nights: 3,
    total: 36_400,
    currency: 'EUR',
    idempotencyKey: `booking-created:${bookingId}`,
  };
};

/** COUNT due deliveries spread over ENDPOINTS endpoints, written in one statement. */
async function backlog(db: Database, hostId: string, endpointIds: string[], count: number): Promise<void> {
  await db.pool.query(
    `with ev as (
       insert into webhook_events (public_id, host_id, type, body, occurred_at)
       select gen_random_uuid(), $1, 'booking.created', json_build_object('type', 'booking.created', 'n', n)::text, now()
         from generate_series(1, $2::int) n
       returning id)
     insert into webhook_deliveries (event_id, endpoint_id)
     select ev.id, ($3::bigint[])[1 + (row_number() over () % array_length($3::bigint[], 1))] from ev`,
    [hostId, count, endpointIds],
  );
}

/** The no-op receiver in a process of its own (./webhook-sink.ts): its URL, and on close the connections it saw and its CPU µs. */
async function sinkProcess() {
  let port = 0;
  let connections = 0;
  let cpuMicros = 0;
  const sink = startNodeProcess({
    entry: 'scripts/bench/webhook-sink.ts',
    env: process.env,
    onLine: (line) => {
      const [word, value] = line.split(' ');
      if (word === 'listening') port = Number(value);
      if (word === 'connections') connections = Number(value);
      if (word === 'cpu') cpuMicros = Number(value);
    },
  });
  await sink.waitForOutput('listening', 30_000);
  let closed: Promise<{ connections: number; cpuMicros: number }> | undefined;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    close: () => (closed ??= sink.stop().then(() => ({ connections, cpuMicros }))),
  };
}

/**
 * `env`: the sender's settings (WEBHOOK_KEEP_ALIVE, the concurrencies) over its defaults.
 * `cpuMicrosPerDelivery`: what a delivery cost each side during the run: the sender (this
 * process), the receiver (from its first request), PostgreSQL (every process of the server, from
 * /proc: null off Linux).
 */
export async function webhookThroughput(databaseUrl: string, count: number, env: Record<string, string> = {}, endpoints = 8) {
  const db = createDatabase(databaseUrl, { max: 8, applicationName: 'bench-webhooks' });
  const sink = await sinkProcess();
  try {
    const { hostId } = await reset(db);
    const ids = [];
    for (let i = 0; i < endpoints; i++) ids.push(await addEndpoint(db, hostId, sink.url));
    await backlog(db, hostId, ids, count);
    const sender = createWebhookSender({
      db: db.db,
      pool: db.pool,
      config: benchConfig(databaseUrl, env),
      logger: pino({ level: 'warn' }),
    });
    const { rows: backend } = await db.pool.query<{ pid: number }>('select pg_backend_pid() as pid');
    const postmaster = postmasterOf(backend[0]!.pid);
    await autovacuumIdle(db);
    const serverCpuBefore = serverCpuMicros(postmaster);
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    await sender.runUntilIdle();
    const seconds = (performance.now() - started) / 1000;
    const senderCpu = process.cpuUsage(cpuBefore);
    const serverCpuAfter = serverCpuMicros(postmaster);
    await sender.stop(0);
    const { rows } = await db.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'succeeded'`);
    if (rows[0]!.n !== count) throw new Error(`webhook bench: ${rows[0]!.n} of ${count} deliveries succeeded`);
    const receiver = await sink.close();
    const perDelivery = (micros: number) => Math.round(micros / count);
    return {
      count,
      endpoints,
      seconds: round(seconds, 3),
      perSecond: Math.round(count / seconds),
      connections: receiver.connections,
      cpuMicrosPerDelivery: {
        sender: perDelivery(senderCpu.user + senderCpu.system),
        receiver: perDelivery(receiver.cpuMicros),
        postgres: serverCpuBefore === null || serverCpuAfter === null ? null : perDelivery(serverCpuAfter - serverCpuBefore),
      },
    };
  } finally {
    await sink.close();
    await db.close();
  }
}

/**
 * Until no autovacuum worker runs on the server (at most 30 s): the PostgreSQL CPU figure is the
 * whole server's, and in a run of several sections autovacuum is still working through the
 * databases the sections before left behind (the drain's). After the drain and latency sections,
 * PostgreSQL's CPU per kept-alive delivery read 502 µs where the section alone read 288; after
 * the drain with this wait, 342 (2026-12-07, docs/performance.md). What autovacuum does to this
 * run's own tables during it still counts.
 */
async function autovacuumIdle(db: Database): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const { rows } = await db.pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where backend_type = 'autovacuum worker'`,
    );
    if (rows[0]!.n === 0) return;
    await sleep(200);
  }
}

/** A healthy endpoint's delivery latency under a steady stream of events, with or without a hanging endpoint beside it. */
async function healthyLatency(databaseUrl: string, opts: { hanging: boolean; rate: number; seconds: number; backlogCount: number }) {
  const db = createDatabase(databaseUrl, { max: 10, applicationName: 'bench-webhooks' });
  const sentAt = new Map<string, number>();
  const latencies: number[] = [];
  // In this process: the latency is read on the bench's clock, when the request's body is in.
  const healthy = await startWebhookReceiver((_n, req) => {
    const t0 = sentAt.get((JSON.parse(req.body) as { eventId: string }).eventId);
    if (t0 !== undefined) latencies.push(performance.now() - t0);
    return { status: 204 };
  });
  const hanging = await startWebhookReceiver(() => ({ hang: true }));
  const config = benchConfig(databaseUrl);
  const sender = createWebhookSender({ db: db.db, pool: db.pool, config, logger: pino({ level: 'silent' }) });
  try {
    const { hostId, propertyId } = await reset(db);
    await addEndpoint(db, hostId, healthy.url);
    if (opts.hanging) await backlog(db, hostId, [await addEndpoint(db, hostId, hanging.url)], opts.backlogCount);
    sender.start();
    if (opts.hanging) await sleep(500); // the hanging endpoint has taken its slots
    const events = Math.round(opts.rate * opts.seconds);
    const gap = 1000 / opts.rate;
    const t0 = performance.now();
    for (let i = 0; i < events; i++) {
      const wait = t0 + i * gap - performance.now();
      if (wait > 0) await sleep(wait);
      const eventId = randomUUID();
      sentAt.set(eventId, performance.now());
      // As the fan-out handler does: the event and its deliveries, then a wake-up of the sender.
      await recordBookingEvent(db.db, { type: 'booking.created', eventId, occurredAt: new Date(), payload: payload(propertyId) });
      sender.wake();
    }
    await healthy.waitForRequests(events, 10_000);
    return { p50Ms: round(percentile(latencies, 50)), p99Ms: round(percentile(latencies, 99)), hangingInFlight: hanging.hanging() };
  } finally {
    await sender.stop(0);
    await healthy.close();
    await hanging.close();
    await db.close();
  }
}

export async function webhookIsolation(databaseUrl: string, opts: { rate?: number; seconds?: number; backlogCount?: number } = {}) {
  const o = { rate: opts.rate ?? 100, seconds: opts.seconds ?? 10, backlogCount: opts.backlogCount ?? 1000 };
  const alone = await healthyLatency(databaseUrl, { ...o, hanging: false });
  const beside = await healthyLatency(databaseUrl, { ...o, hanging: true });
  return {
    events: Math.round(o.rate * o.seconds),
    alone: { p50Ms: alone.p50Ms, p99Ms: alone.p99Ms },
    besideHanging: beside,
    p99Ratio: round(beside.p99Ms / alone.p99Ms),
  };
}

export async function benchWebhooks(opts: { databaseUrl: string; count: number; rate?: number; seconds?: number }) {
  return {
    throughput: await webhookThroughput(opts.databaseUrl, opts.count),
    isolation: await webhookIsolation(opts.databaseUrl, { rate: opts.rate, seconds: opts.seconds }),
  };
}

runIfEntry(
  import.meta.url,
  {
    command: 'bench webhooks',
    usage: 'usage: node --import tsx scripts/bench/webhooks.ts --database-url URL [--count N] [--rate N] [--seconds N]',
    indent: 2,
  },
  (databaseUrl, flag) =>
    benchWebhooks({
      databaseUrl,
      count: Number(flag('count') ?? 5000),
      rate: flag('rate') ? Number(flag('rate')) : undefined,
      seconds: flag('seconds') ? Number(flag('seconds')) : undefined,
    }),
);

type Throughput = { perSecond: number; seconds: number };
/**
 * CPU µs per delivery during the run, each way: the sender's process, the receiver's (from its
 * first request), PostgreSQL's (every process of the server, read from /proc; none off Linux).
 * What bounds deliveries/s when the three share the machine's cores.
 */
type Cpu = { sender: number; receiver: number; postgres: number };
type Isolation = { aloneP50: number; aloneP99: number; besideP50: number; besideP99: number; p99Ratio: number };

/** Deliveries/s to a no-op receiver (kept-alive and a connection per attempt), and a healthy endpoint beside a hanging one. */
export const webhooksSection = {
  name: 'webhooks',
  markdown: [{ place: 9, render: webhooksMarkdown }],
  async run({ P, log, freshOurs, results }: BenchContext) {
    const throughput: Throughput[] = [];
    const isolation: Isolation[] = [];
    const perAttempt: Throughput[] = [];
    const cpu: Cpu[] = [];
    const cpuPerAttempt: Cpu[] = [];
    for (let r = 0; r < P.runs; r++) {
      // Kept-alive connections (the default) and a new connection per attempt, turn about.
      for (const keepAlive of r % 2 === 0 ? [true, false] : [false, true]) {
        const t = await webhookThroughput(await freshOurs(), P.webhookDeliveries, { WEBHOOK_KEEP_ALIVE: String(keepAlive) });
        (keepAlive ? throughput : perAttempt).push({ perSecond: t.perSecond, seconds: t.seconds });
        const c = t.cpuMicrosPerDelivery;
        if (c.postgres !== null) (keepAlive ? cpu : cpuPerAttempt).push({ sender: c.sender, receiver: c.receiver, postgres: c.postgres });
        log(
          `   webhooks to a no-op receiver, ${keepAlive ? 'kept-alive connections' : 'a connection per attempt'}: ${t.perSecond} deliveries/s (${t.seconds} s, ${t.endpoints} endpoints, ${t.connections} connections; CPU µs per delivery: sender ${c.sender}, receiver ${c.receiver}, PostgreSQL ${c.postgres ?? 'unknown'})`,
        );
      }
      const i = await webhookIsolation(await freshOurs(), { rate: P.webhookRate, seconds: P.webhookSeconds });
      isolation.push({
        aloneP50: i.alone.p50Ms,
        aloneP99: i.alone.p99Ms,
        besideP50: i.besideHanging.p50Ms,
        besideP99: i.besideHanging.p99Ms,
        p99Ratio: i.p99Ratio,
      });
      log(
        `   healthy endpoint p50/p99: alone ${i.alone.p50Ms}/${i.alone.p99Ms} ms, beside a hanging one ${i.besideHanging.p50Ms}/${i.besideHanging.p99Ms} ms (${i.p99Ratio}×)`,
      );
    }
    const tp = repeatOf(throughput);
    const pa = repeatOf(perAttempt);
    const noop = noopDrainOf(results);
    return {
      webhooks: {
        deliveries: P.webhookDeliveries,
        throughput: tp,
        throughputPerAttemptConnection: pa,
        keepAliveRatio: round(tp.median.perSecond / pa.median.perSecond, 3),
        ...(cpu.length > 0 && cpuPerAttempt.length > 0 ? { cpu: repeatOf(cpu), cpuPerAttemptConnection: repeatOf(cpuPerAttempt) } : {}),
        ratioToNoopDrain: noop ? round(tp.median.perSecond / noop, 3) : null,
        isolation: repeatOf(isolation),
      },
    };
  },
};

/** Our no-op drain ×1, when the drain section ran before (the context's results name no section's figures). */
const noopDrainOf = (r: object): number | undefined => (r as PartOf<typeof drainSection>).drain?.configs.ours1?.runs.median.perSecond;

const cpuCell = (c: Repeated<Cpu>) => {
  const m = c.median;
  return `${n(m.sender)} / ${n(m.receiver)} / ${n(m.postgres)} (${n(m.sender + m.receiver + m.postgres)} in all)`;
};

function webhooksMarkdown(r: PartOf<typeof webhooksSection>): string[] {
  if (!r.webhooks) return [];
  const w = r.webhooks;
  const p = r.params;
  const runs = (rep: { runs: Throughput[] }) => rep.runs.map((v) => n(v.perSecond)).join(', ');
  const L = [
    `## 9. Webhooks (scripts/bench/webhooks.ts)`,
    '',
    `${n(w.deliveries)} deliveries, written before the clock starts, sent by one process's webhook sender (its defaults: 32 in flight, 4 per endpoint, 8 per host) to 8 endpoints of a local receiver that answers 204 at once; each signed, POSTed and its attempt recorded; on kept-alive connections (the default), and, in the same runs, on a new connection per attempt (WEBHOOK_KEEP_ALIVE=false).`,
    '',
    '| Figure | Median | Runs |',
    '|---|---:|---|',
    `| deliveries/s to a no-op receiver, kept-alive connections | ${mm(w.throughput, 'perSecond')} | ${runs(w.throughput)} |`,
    ...(w.throughputPerAttemptConnection
      ? [
          `| deliveries/s to a no-op receiver, a new connection per attempt | ${mm(w.throughputPerAttemptConnection, 'perSecond')} | ${runs(w.throughputPerAttemptConnection)} |`,
          `| kept-alive / a connection per attempt (medians) | ${x(w.keepAliveRatio)} | |`,
        ]
      : []),
    ...(w.cpu && w.cpuPerAttemptConnection
      ? [
          `| CPU µs per delivery, kept-alive: sender / receiver / PostgreSQL | ${cpuCell(w.cpu)} | |`,
          `| CPU µs per delivery, a connection per attempt: sender / receiver / PostgreSQL | ${cpuCell(w.cpuPerAttemptConnection)} | |`,
        ]
      : []),
    `| healthy endpoint p50 / p99, alone (ms) | ${mm(w.isolation, 'aloneP50', 1)} / ${mm(w.isolation, 'aloneP99', 1)} | ${w.isolation.runs.map((v) => `${n(v.aloneP99, 1)}`).join(', ')} (p99) |`,
    `| healthy endpoint p50 / p99 beside an endpoint that never answers, with ${n(1000)} deliveries due (ms) | ${mm(w.isolation, 'besideP50', 1)} / ${mm(w.isolation, 'besideP99', 1)} | ${w.isolation.runs.map((v) => `${n(v.besideP99, 1)}`).join(', ')} (p99) |`,
    '',
    `Latency: ${n(p.webhookRate)} booking events a second for ${n(p.webhookSeconds)} s, each recorded as the fan-out handler records it and the sender woken; clock from the record to the request's arrival at the receiver.` +
      (w.ratioToNoopDrain === null ? '' : ` Deliveries/s over our no-op outbox drain ×1: ${x(w.ratioToNoopDrain)}.`),
    '',
  ];
  targetLines(L, r.targets, 'Webhooks');
  return L;
}
