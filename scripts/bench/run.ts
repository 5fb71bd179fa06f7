import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  apiBookings,
  apiConflicts,
  pgbenchBookings,
  POOLED_SERVER_CONNECTIONS,
  startApi,
  startPooledApi,
  useFixedRequestCounts,
  type ApiFixture,
} from './api.ts';
import { pgbenchVersion, PGBENCH_INSTALL_HINT } from './lib/pgbench.ts';
import { parseFlags, usageError } from './lib/cli.ts';
import { machine, postgresSettings, startServer, versions, type BenchServer } from './lib/server.ts';
import { compareConfigs, percentile, repeat, repeatOf, round, type Compared, type Measured, type Repeated } from './lib/stats.ts';
import { graphileCliBurst, graphileRunBurst, oursBurst, pgBossBurst, type Burst } from './burst.ts';
import { drainFloor, latencyFloor } from './floors.ts';
import { codeVersion, loadBefore } from './lib/trace.ts';
import {
  addPending,
  cloneDatabase,
  concurrentPurge,
  rowsInDay,
  dropDatabase,
  dropPartitionCost,
  fillBookingHistory,
  fillDoneHistory,
  purgeCost,
} from './history.ts';
import type { Beside, DropCost, HistoryDay, PurgeCost, PurgeWay } from './history.ts';
import { claimTimes, explainClaim, oursDrain, oursLatency, prepareClaimTables, timeClaims } from './ours.ts';
import { OVERLOAD_SETUP, overloadSection, type OverloadResults } from './overload.ts';
import { DEFAULT_OUT, FULL, SECTIONS, SMOKE, type BenchParams, type PgBossConfig } from './params.ts';
import { graphileDrain, graphileLatency, graphileRunDrain, setupGraphile } from './peers/graphile.ts';
import { PEERS } from './peers/guarantees.ts';
import { PGBOSS_POLL_SECONDS, pgBossDrain, pgBossLabel, pgBossLatency, setupPgBoss } from './peers/pgboss.ts';
import { webhookIsolation, webhookThroughput } from './webhooks.ts';
import { tracingSection, type TracingResults } from './tracing.ts';
import { NOISY_FULL, NOISY_SMOKE, noisyNeighbour, noisyResult, type NoisyMode, type NoisyResult, type NoisyRun } from './noisy.ts';
import {
  NATS_INSTALL_HINT,
  natsServerVersion,
  RELAY_CONCURRENCY,
  relayDrain,
  relayFloor,
  startNatsCluster,
  startNatsServer,
} from './relay.ts';
import { renderMarkdown } from './report.ts';
import { evaluateTargets } from './targets.ts';

/*
 * `npm run bench` and `npm run bench -- --smoke` (`npm run bench:smoke`; how long each takes:
 * docs/performance.md): one embedded PostgreSQL with default settings, every system in its own database
 * on it, each measurement repeated (FULL.runs times in the full run) and reported as the median of
 * its runs. Writes bench-results.json and bench-results.md to var/bench/ (git-ignored: a run's
 * figures are data, not source), or to --out DIR. Flags: USAGE below.
 *
 * The same rules for every system: a fresh database for every run of every system (cloned from a
 * template with its schema), the same start of the clock (first handler entered, or the burst's
 * COMMIT) and the same end (nothing pending, seen by one observer: lib/settled.ts), runs of all
 * systems interleaved, each median with its min–max, the commit and the load average before each
 * section (flagged when it exceeded the cores).
 *
 * Peers at their strongest: each peer is measured in several supported configurations (graphile-
 * worker as CLI processes and in-process run(); pg-boss at several batch sizes and work() loops;
 * bursts after a warm-up batch and without one), every one is reported, and each of ours is
 * compared with each peer's strongest configuration (best median) and with the strongest of all.
 * Beside us, the floors (floors.ts, relay.ts): the same work with no framework around it.
 */

const USAGE = `usage: npm run bench -- [--smoke] [--out DIR] [--only SECTION,...]

Measures the outbox worker, the API and the events relay against graphile-worker, pg-boss and
pgbench on one embedded PostgreSQL, and writes bench-results.json and bench-results.md.

  --smoke               every measurement once, on tiny inputs (about 30-60 s; npm run bench:smoke)
  --out DIR             where to write the two result files (default: var/bench)
  --only SECTION,...    only these sections: ${SECTIONS.join(', ')}
  -h, --help            print this and exit

Environment:
  PGBENCH                       the pgbench binary (default /usr/bin/pgbench)
  BENCH_CODE_COMMIT             the commit measured, when the tree is not a git checkout
  BENCH_RUNS=N                  measure each figure N times instead of 5 (quicker, noisier)
  BENCH_BURST_TRACE=1           log the outbox every 500 ms during each burst
  BENCH_WORKER_STDIO=inherit    show our burst workers' own logs
`;

const flags = parseFlags('bench', USAGE, { smoke: { type: 'boolean' }, out: { type: 'string' }, only: { type: 'string' } });
const only = flags.only === undefined ? undefined : new Set(flags.only.split(',').map((s) => s.trim()));
for (const name of only ?? []) {
  if (!(SECTIONS as readonly string[]).includes(name)) usageError('bench', USAGE, `--only: unknown section "${name}"`);
}
const P: BenchParams = { ...(flags.smoke ? SMOKE : FULL), ...(process.env.BENCH_RUNS ? { runs: Number(process.env.BENCH_RUNS) } : {}) };
if (!(Number.isInteger(P.runs) && P.runs > 0))
  usageError('bench', USAGE, `BENCH_RUNS: expected a positive whole number, got "${process.env.BENCH_RUNS}"`);
const outDir = path.resolve(flags.out ?? DEFAULT_OUT);
useFixedRequestCounts(P.httpRequestsPerConnection);

/** Where the API is also compared with pgbench -M prepared: the target's connection count. */
const PREPARED_CONNECTIONS = 8;

/**
 * Our worker set up for throughput, as the peers are set up by their authors' recommendations: a
 * larger first claim (a backlog grows every claim up to WORKER_MAX_BATCH_SIZE, written out here as
 * its default) and more handlers in flight. The defaults (20 growing to 1,000, concurrency 8) suit
 * email handlers talking to one SMTP server; a no-op drain measures the queue itself.
 */
const OURS_THROUGHPUT = { WORKER_BATCH_SIZE: '500', WORKER_MAX_BATCH_SIZE: '1000', WORKER_CONCURRENCY: '32' };

/** A pg-boss configuration's key in the results: pgBoss5000x1, pgBoss5000x1Keyed. */
const pgBossKey = (c: PgBossConfig) => `pgBoss${c.batchSize}x${c.workers}${c.keyed ? 'Keyed' : ''}`;
/** The system a peer's configuration counts as: its fastest, or its same-guarantee one (peers/guarantees.ts). */
const pgBossSystem = (c: PgBossConfig) => (c.keyed ? PEERS.pgBoss.same : PEERS.pgBoss.fastest);

const t0 = Date.now();
const log = (msg: string) => process.stdout.write(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${msg}\n`);

type Drain = { perSecond: number; drainSeconds: number };

type Lat = { p50: number; p99: number; max: number; mean: number };

type ClaimLat = { p50: number; p99: number };

type ApiLat = { rps: number; p50: number; p99: number };

export interface BenchResults {
  mode: 'full' | 'smoke';
  startedAt: string;
  durationSeconds?: number;
  /** The code measured: HEAD and whether the tree had uncommitted changes. */
  code: ReturnType<typeof codeVersion>;
  /** The 1-minute load average before each section; `overloaded` when it exceeded the cores. */
  load: Record<string, ReturnType<typeof loadBefore>>;
  machine: ReturnType<typeof machine>;
  versions: ReturnType<typeof versions>;
  postgresSettings: Record<string, string>;
  params: BenchParams;
  setup: Record<string, string>;
  claim?: { runs: Repeated<{ emptyMs: number; withHistoryMs: number; ratio: number }>; explain: string };
  /**
   * The backlog drain. Configurations: ours1, ours2 (throughput settings), ours1Default; floor1,
   * floor2 (floors.ts drainFloor, 1 and 2 lanes); the peers'. `floorRatios`: ours ×n / floor ×n.
   */
  drain?: Compared<Drain> & { floorRatios: { ours1: number; ours2: number } };
  /** Idle workers hit by one burst; each configuration after a warm-up batch and without (`…Cold`). */
  burst?: Compared<Burst> & { messages: number };
  /** Commit → handler, and the bare LISTEN/NOTIFY round trip (floors.ts latencyFloor); `floorRatios`: ours / floor. */
  latency?: {
    ours: Repeated<Lat>;
    graphile: Repeated<Lat>;
    pgBoss: Repeated<Lat>;
    /** Each peer's same-guarantee configuration: a queue per key (peers/guarantees.ts). */
    graphileKeyed: Repeated<Lat>;
    pgBossKeyed: Repeated<Lat>;
    floor: Repeated<Lat>;
    floorRatios: { p50: number; p99: number };
  };
  /** The events relay (relay.ts) against the relay floor (a bare JetStream client); null: nats-server not installed. */
  relay?: {
    messages: number;
    relay: Repeated<Drain>;
    floor: Repeated<Drain>;
    /** Median relay msg/s over median floor msg/s (target ≥ 0.8). */
    ratio: number;
    /** The same relay into a three-node cluster, the stream at three replicas (absent in results of older runs). */
    replicated?: Repeated<Drain>;
    /** Median relay msg/s at three replicas over median at one. */
    replicatedRatio?: number;
  } | null;
  io?: { byProcesses: Record<string, Repeated<Drain>>; scaling: Record<string, number> };
  /**
   * Webhooks (webhooks.ts): deliveries/s to a local no-op receiver, as a ratio to our no-op drain
   * ×1 when the drain section ran; a healthy endpoint's latency alone and beside a hanging one.
   */
  tracing?: TracingResults;
  webhooks?: {
    deliveries: number;
    /** With kept-alive connections (the default). */
    throughput: Repeated<{ perSecond: number; seconds: number }>;
    /** The same, a new connection per attempt (WEBHOOK_KEEP_ALIVE=false); `keepAliveRatio`: kept-alive / this, medians. */
    throughputPerAttemptConnection: Repeated<{ perSecond: number; seconds: number }>;
    keepAliveRatio: number;
    ratioToNoopDrain: number | null;
    isolation: Repeated<{ aloneP50: number; aloneP99: number; besideP50: number; besideP99: number; p99Ratio: number }>;
  };
  /** Noisy neighbour (noisy.ts): quiet hosts' booking emails beside one host's flood, with priorities and turns and FIFO. */
  noisy?: NoisyResult;

  api?: {
    byConnections: {
      connections: number;
      api: Repeated<{ rps: number; p99: number }>;
      pgbench: Repeated<{ tps: number; p99: number }> | null;
      ratio: number | null;
    }[];
    non201: number;
    /**
     * The target's comparison, at 8 connections: pgbench with `-M prepared`, the protocol of the
     * API's named booking statements (parsed once per connection). `byConnections` compares with
     * pgbench -M extended (parse, bind and execute every time), the looser peer.
     */
    prepared: { connections: number; pgbench: Repeated<{ tps: number; p99: number }>; ratio: number } | null;
    /**
     * The same POST /bookings, in the same runs, against a second API through PgBouncer in
     * transaction mode (DATABASE_POOLER=transaction; startPooledApi); ratio: pooled / direct
     * median req/s. Null without pgbouncer.
     */
    pooled?: {
      serverConnections: number;
      byConnections: { connections: number; pooled: Repeated<{ rps: number; p99: number }>; ratio: number }[];
      non201: number;
    } | null;
  };
  outboxCost?: {
    clients: number;
    withOutbox: Repeated<{ tps: number; p99: number }>;
    withoutOutbox: Repeated<{ tps: number; p99: number }>;
    ratio: number;
    costPercent: number;
    diagnostics: {
      rowWithoutNotify: Repeated<{ tps: number; p99: number }>;
      notifyInTransaction: Repeated<{ tps: number; p99: number }>;
      rowWithoutNotifyCostPercent: number;
      notifyInTransactionCostPercent: number;
    };
  } | null;
  conflicts?: {
    connections: number;
    runs: Repeated<{
      rps: number;
      p99: number;
      share409: number;
      server5xx: number;
      created201: number;
      conflict409: number;
      other: number;
      requests: number;
      rounds: number;
      bookingsKept: number;
      maxWinnersPerRound: number;
    }>;
    expectedShare409: number;
  };
  /**
   * A long DONE history and its purge (history.ts): `rows` DONE rows in a day partition of their
   * own, purged at the clock where the retention has passed over that day, both ways, each once a
   * run on a fresh clone: deleted row by row (`deleteRows`: the path of a day that cannot go whole,
   * and the purge before partitions) and the partition dropped (`dropPartition`, as the
   * housekeeping drops an expired day); the drop alone of a larger day (`dropLargePartition`); and
   * our drain and claim alone, beside the DELETE and beside the DROP. Ratios: median beside /
   * median alone.
   */
  purge?: {
    rows: number;
    deleteRows: Repeated<PurgeCost>;
    dropPartition: Repeated<DropCost>;
    dropLargePartition: { rows: number; runs: Repeated<DropCost> };
    drain: {
      messages: number;
      alone: Repeated<Drain>;
      besideDelete: Repeated<Drain & Beside>;
      besideDrop: Repeated<Drain & Beside>;
      deleteRatio: number;
      dropRatio: number;
    };
    claim: {
      samples: number;
      pending: number;
      alone: Repeated<ClaimLat>;
      besideDelete: Repeated<ClaimLat & Beside>;
      besideDrop: Repeated<ClaimLat & Beside>;
      deleteP50Ratio: number;
      deleteP99Ratio: number;
      dropP50Ratio: number;
      dropP99Ratio: number;
    };
  };
  /** Our drain (throughput settings) and claim on outboxes holding a DONE history of each size. */
  growth?: {
    messages: number;
    byHistory: { history: number; byProcesses: Record<string, Repeated<Drain>>; claimMs: Repeated<{ ms: number }> }[];
  };
  /** POST /bookings at `connections` on an empty bookings table and on one holding `bookings` past stays. */
  apiHistory?: {
    connections: number;
    bookings: number;
    empty: Repeated<ApiLat>;
    history: Repeated<ApiLat>;
    p50Ratio: number;
    p99Ratio: number;
    non201: number;
  };
  /** Half the clients booking, half searching, with and without load shedding (overload.ts). */
  overload?: OverloadResults;
  targets?: ReturnType<typeof evaluateTargets>;
  errors: { section: string; message: string }[];
}

async function main(): Promise<number> {
  log(`StayHub bench (${flags.smoke ? 'smoke' : 'full'}), results to ${outDir}`);
  const pgbench = await pgbenchVersion();
  if (!pgbench) log(PGBENCH_INSTALL_HINT);
  const natsServer = natsServerVersion();
  if (!natsServer && (!only || only.has('relay'))) log(NATS_INSTALL_HINT);

  const server: BenchServer = await startServer(log);
  // Ctrl-C: the server runs in its own process group, so it must be stopped here or be orphaned.
  const onSignal = () => {
    log('interrupted: stopping postgres');
    void server.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const results: BenchResults = {
    mode: flags.smoke ? 'smoke' : 'full',
    startedAt: new Date(t0).toISOString(),
    code: codeVersion(),
    load: {},
    machine: machine(),
    versions: versions('', pgbench, natsServer),
    postgresSettings: {},
    params: P,
    setup: {
      ours: `scripts/bench/bench-worker.ts (= src/worker/drain-outbox.ts + bench handlers), --until-empty, LOG_LEVEL=warn; drain: our throughput settings WORKER_BATCH_SIZE=${OURS_THROUGHPUT.WORKER_BATCH_SIZE} WORKER_MAX_BATCH_SIZE=${OURS_THROUGHPUT.WORKER_MAX_BATCH_SIZE} WORKER_CONCURRENCY=${OURS_THROUGHPUT.WORKER_CONCURRENCY} (as the peers run with their authors' throughput settings); I/O scaling: the defaults (20 growing to 1,000 / 8)`,
      drainClock:
        'from the first handler entered (any process) to nothing pending, seen by one observer polling every 10 ms (the same for every system); messages committed before; a fresh database for every run of every system',
      burst: `every system started in its long-running mode and idle (listening or polling), each configuration two ways: after a warm-up of 100 handled then 1 s idle, and cold (1 s idle, no warm-up); then ${P.burstMessages.toLocaleString('en-US')} no-op messages committed in one statement; clock from that COMMIT to nothing pending (same observer); ours with our throughput settings and LOG_LEVEL=warn, graphile-worker perfTest settings (CLI processes, and in-process run()), pg-boss in each configuration`,
      graphileWorker: `perfTest settings (scripts/bench/peers/graphile.config.cjs): concurrentJobs 24, maxPoolSize 25, localQueue 500 (refetch 10 ms), completeJobBatchDelay 0; drain: ${P.graphileProcesses} × graphile-worker --once (perfTest/run.js), and one in-process run({ preset, taskList }); burst: the CLI long-running (×${P.burstGraphileProcesses.join(', ×')}), and in-process run()`,
      pgBoss: `one work() per run, woken by LISTEN/NOTIFY (useListenNotify, queue notify), burstWhenBatchFull, polling every ${PGBOSS_POLL_SECONDS} s behind it (its minimum), in each of: ${P.pgBossConfigs.map(pgBossLabel).join('; ')}; supervise and schedule off; latency: batch 1`,
      sameGuarantees:
        'each peer also in its configuration that keeps what we keep (scripts/bench/peers/guarantees.ts): graphile-worker a queue_name per key, pg-boss a key_strict_fifo queue with a singletonKey per key and completed jobs kept 7 days; keys as ours, unique per message and time-ordered',
      floors: `drain floor: our claim statement (src/outbox/claim.ts, claim connection settings) and our DONE statement (src/outbox/settle.ts markDoneMany) for the ids claimed, bare pg, batch ${OURS_THROUGHPUT.WORKER_MAX_BATCH_SIZE} (the largest claim ours grows to in a backlog), per lane one claim connection and one DONE write in flight as per worker process of ours, the next claim overlapping the DONE write; latency floor: an outbox row and pg_notify committed in one transaction, clock from COMMIT sent to the notification on another connection; relay floor: the same messages published by a bare JetStream client, ${RELAY_CONCURRENCY} publishes in flight, each awaiting its PubAck`,
      latency: 'in-process worker, idle, one message per transaction; clock from COMMIT sent to handler entered',
      relay: `in-process worker (createWorker, batch 500, concurrency ${RELAY_CONCURRENCY}, LOG_LEVEL=warn), ${P.relayMessages.toLocaleString('en-US')} booking.created messages committed before the clock starts, the events relay publishing each into JetStream and awaiting its PubAck (EVENTS_PUBLISH_TIMEOUT_MS default); clock from the first claim to nothing pending; beside it the relay floor; a fresh nats-server -js with file storage and a fresh database for every measurement`,
      api: `node --import tsx src/http/server.ts (own process, LOG_LEVEL=warn, DB_POOL_MAX default), autocannon in the bench process; beside it, in the same runs, a second API on a database of its own through PgBouncer (pool_mode transaction, default_pool_size ${POOLED_SERVER_CONNECTIONS}) with DATABASE_POOLER=transaction`,
      history: `DONE rows created 1 ms apart in the day partition 3 days ahead (outbox_YYYYMMDD, made by outbox_ensure_partitions: a day of their own, apart from today's live rows) and processed 30 days ago, inserted in two statements at once; VACUUM ANALYZE; one template database per history size, cloned (CREATE DATABASE … STRATEGY FILE_COPY) for every measurement and dropped after it; PENDING rows for claims: ${P.claimPending.toLocaleString('en-US')} added to the clone (today's partition), VACUUM ANALYZE`,
      purge: `both purges at the clock where OUTBOX_RETENTION_DAYS has passed over the history's day (its end + the retention): DELETE, src/outbox/purge.ts purgeDoneBatch in purgeDone's loop, 1,000 rows a statement (the housekeeping's batch), each batch timed; DROP, src/outbox/partitions.ts dropOutboxPartition on the history's partition (its rows from the statistics, DETACH … CONCURRENTLY, DROP TABLE, each statement timed) after a CHECKPOINT; WAL: pg_wal_lsn_diff of pg_current_wal_lsn() before and after, nothing else running; sizes: summed over pg_partition_tree's leaves; beside a measurement: the same DELETE loop or DROP on a connection of its own, started with the measurement's clock, the DELETE stopped between two batches when it ends, the DROP awaited`,
      apiHistory: `the api section's POST /bookings (autocannon, ${PREPARED_CONNECTIONS} connections) against two APIs started together, one on an empty bookings table, one on a table holding past stays inserted in SQL (200 two-night stays per property of their own, one every 3 days back from yesterday, none overlapping), runs alternating between them`,
      pgbench:
        "-M extended, and -M prepared at 8 connections (the target's peer: the protocol of the API's named statements), the booking transaction of src/bookings/booking.service.ts as SQL (scripts/bench/api.ts bookingScript)",
    },
    errors: [],
  };
  const section = async (name: string, fn: () => Promise<void>) => {
    if (only && !only.has(name)) return;
    const t = Date.now();
    const load = loadBefore();
    results.load[name] = load;
    log(
      `== ${name} (load average ${load.loadAverage1m} on ${load.cores} cores${load.overloaded ? ': OVERLOADED, figures of this section are suspect' : ''})`,
    );
    try {
      await fn();
    } catch (err) {
      const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
      results.errors.push({ section: name, message });
      log(`!! ${name} failed: ${message}`);
    }
    log(`   ${name}: ${((Date.now() - t) / 1000).toFixed(1)} s`);
  };

  let dbSeq = 0;
  const freshOurs = () => server.createDatabase(`ours_${dbSeq++}`, server.ourTemplate);

  try {
    results.postgresSettings = await postgresSettings(server.url('postgres'));
    results.versions = versions(results.postgresSettings.server_version ?? 'unknown', pgbench, natsServer);

    await section('claim', async () => {
      const emptyUrl = await freshOurs();
      const historyUrl = await freshOurs();
      log(`   filling: ${P.claimPending} PENDING each, ${P.claimDone} DONE in the second`);
      await prepareClaimTables(emptyUrl, historyUrl, P.claimPending, P.claimDone);
      const runs = await repeat(P.runs, async () => {
        const emptyMs = await timeClaims(emptyUrl, P.claimSamples, P.claimBatch);
        const withHistoryMs = await timeClaims(historyUrl, P.claimSamples, P.claimBatch);
        log(`   claim: ${emptyMs.toFixed(3)} ms empty, ${withHistoryMs.toFixed(3)} ms with history`);
        return { emptyMs, withHistoryMs, ratio: withHistoryMs / emptyMs };
      });
      results.claim = { runs, explain: await explainClaim(historyUrl, P.claimBatch) };
    });

    // Templates with each peer's schema installed once: every run clones a fresh database, as ours does.
    let peerTemplates: Promise<{ graphile: string; pgBoss: string }> | undefined;
    const templates = () =>
      (peerTemplates ??= (async () => {
        await setupGraphile(await server.createDatabase('graphile_template'));
        await setupPgBoss(await server.createDatabase('pgboss_template'));
        return { graphile: 'graphile_template', pgBoss: 'pgboss_template' };
      })());
    const freshGraphile = async () => server.createDatabase(`graphile_${dbSeq++}`, (await templates()).graphile);
    const freshPgBoss = async () => server.createDatabase(`pgboss_${dbSeq++}`, (await templates()).pgBoss);

    /** Runs `measure`, keeps its result under `key` (with whose it is and its label) and logs it. */
    const recorder = <T extends Record<string, number>>(show: (t: T) => string) => {
      const runs: Record<string, { system: string; label: string; runs: T[] }> = {};
      return {
        async measure(key: string, system: string, label: string, measure: () => Promise<T>) {
          const t = await measure();
          (runs[key] ??= { system, label, runs: [] }).runs.push(t);
          log(`   ${label}: ${show(t)}`);
          return t;
        },
        configs: (): Record<string, Measured<T>> =>
          Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, { system: v.system, label: v.label, runs: repeatOf(v.runs) }])),
      };
    };
    await section('drain', async () => {
      const rec = recorder<Drain>((d) => `${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`);
      // The floor claims as many as ours does once the backlog has grown its claims.
      const batch = Number(OURS_THROUGHPUT.WORKER_MAX_BATCH_SIZE);
      const ours = (processes: number, env: Record<string, string>) => async () =>
        oursDrain(await freshOurs(), { topic: 'bench.noop', count: P.drainMessages, processes, env });
      // Interleaved, so a slow phase of a shared machine does not land on one system only.
      for (let r = 0; r < P.runs; r++) {
        await rec.measure('ours1', 'ours', 'ours ×1', ours(1, OURS_THROUGHPUT));
        await rec.measure('ours2', 'ours', 'ours ×2', ours(2, OURS_THROUGHPUT));
        // One process at the defaults and the default log level: what a user gets without tuning.
        await rec.measure('ours1Default', 'ours', 'ours ×1, defaults, LOG_LEVEL=info', ours(1, { LOG_LEVEL: 'info' }));
        for (const lanes of [1, 2]) {
          await rec.measure(`floor${lanes}`, 'floor', `drain floor ×${lanes}`, async () =>
            drainFloor(await freshOurs(), { count: P.drainMessages, lanes, batch }),
          );
        }
        for (const keyed of [false, true]) {
          const [k, sys, l] = keyed ? ['Keyed', PEERS.graphile.same, ', a queue per key'] : ['', PEERS.graphile.fastest, ''];
          await rec.measure(`graphileCli${k}`, sys, `graphile-worker ${P.graphileProcesses} × --once${l}`, async () =>
            graphileDrain(await freshGraphile(), P.drainMessages, P.graphileProcesses, keyed),
          );
          await rec.measure(`graphileRun${k}`, sys, `graphile-worker run() in-process${l}`, async () =>
            graphileRunDrain(await freshGraphile(), P.drainMessages, keyed),
          );
        }
        for (const cfg of P.pgBossConfigs) {
          await rec.measure(pgBossKey(cfg), pgBossSystem(cfg), `pg-boss ${pgBossLabel(cfg)}`, async () =>
            pgBossDrain(await freshPgBoss(), P.drainMessages, r, cfg),
          );
        }
      }
      const c = compareConfigs(rec.configs(), (d) => d.perSecond, ['ours1', 'ours2', 'ours1Default'], ['ours1', 'ours2']);
      const perSecond = (k: string) => c.configs[k]!.runs.median.perSecond;
      results.drain = {
        ...c,
        floorRatios: {
          ours1: round(perSecond('ours1') / perSecond('floor1'), 3),
          ours2: round(perSecond('ours2') / perSecond('floor2'), 3),
        },
      };
      log(`   ours / drain floor: ×1 ${results.drain.floorRatios.ours1}, ×2 ${results.drain.floorRatios.ours2}`);
    });

    await section('burst', async () => {
      const rec = recorder<Burst>((b) => `${Math.round(b.perSecond)} msg/s (${b.seconds.toFixed(2)} s from COMMIT)`);
      const n = P.burstMessages;
      for (let r = 0; r < P.runs; r++) {
        for (const warm of P.burstWarmUps) {
          // Keys and labels: the warm-up run is the plain one, the other is "cold".
          const k = (key: string) => (warm ? key : `${key}Cold`);
          const l = (label: string) => (warm ? label : `${label}, cold`);
          for (const processes of [1, 2]) {
            await rec.measure(k(`ours${processes}`), 'ours', l(`ours ×${processes}`), async () =>
              oursBurst(await freshOurs(), n, processes, OURS_THROUGHPUT, warm),
            );
          }
          for (const keyed of [false, true]) {
            const [q, sys, ql] = keyed ? ['Keyed', PEERS.graphile.same, ', a queue per key'] : ['', PEERS.graphile.fastest, ''];
            for (const processes of P.burstGraphileProcesses) {
              await rec.measure(k(`graphileCli${processes}${q}`), sys, l(`graphile-worker CLI ×${processes}${ql}`), async () =>
                graphileCliBurst(await freshGraphile(), n, processes, warm, keyed),
              );
            }
            await rec.measure(k(`graphileRun${q}`), sys, l(`graphile-worker run() in-process${ql}`), async () =>
              graphileRunBurst(await freshGraphile(), n, warm, keyed),
            );
          }
          for (const cfg of P.pgBossConfigs) {
            await rec.measure(k(pgBossKey(cfg)), pgBossSystem(cfg), l(`pg-boss ${pgBossLabel(cfg)}`), async () =>
              pgBossBurst(await freshPgBoss(), n, cfg, warm),
            );
          }
        }
      }
      const configs = rec.configs();
      const oursKeys = Object.keys(configs).filter((k) => configs[k]!.system === 'ours');
      results.burst = { messages: n, ...compareConfigs(configs, (b) => b.perSecond, oursKeys, oursKeys) };
    });

    await section('latency', async () => {
      const ours: Lat[] = [];
      const graphile: Lat[] = [];
      const pgBoss: Lat[] = [];
      const graphileKeyed: Lat[] = [];
      const pgBossKeyed: Lat[] = [];
      const floor: Lat[] = [];
      const show = (who: string, l: Lat) => log(`   ${who}: p50 ${l.p50} ms, p99 ${l.p99} ms, max ${l.max} ms`);
      for (let r = 0; r < P.runs; r++) {
        ours.push(await oursLatency(await freshOurs(), P.latencySamples));
        show('ours', ours.at(-1)!);
        floor.push(await latencyFloor(await freshOurs(), P.latencyFloorSamples));
        show('floor (bare LISTEN/NOTIFY round trip)', floor.at(-1)!);
        graphile.push(await graphileLatency(await freshGraphile(), P.latencySamples));
        show('graphile-worker', graphile.at(-1)!);
        pgBoss.push(await pgBossLatency(await freshPgBoss(), P.pgBossLatencySamples));
        show('pg-boss', pgBoss.at(-1)!);
        graphileKeyed.push(await graphileLatency(await freshGraphile(), P.latencySamples, true));
        show('graphile-worker, a queue per key', graphileKeyed.at(-1)!);
        pgBossKeyed.push(await pgBossLatency(await freshPgBoss(), P.pgBossLatencySamples, true));
        show('pg-boss, key_strict_fifo per key', pgBossKeyed.at(-1)!);
      }
      const o = repeatOf(ours);
      const f = repeatOf(floor);
      results.latency = {
        ours: o,
        graphile: repeatOf(graphile),
        pgBoss: repeatOf(pgBoss),
        graphileKeyed: repeatOf(graphileKeyed),
        pgBossKeyed: repeatOf(pgBossKeyed),
        floor: f,
        floorRatios: { p50: round(o.median.p50 / f.median.p50, 3), p99: round(o.median.p99 / f.median.p99, 3) },
      };
    });

    await section('io', async () => {
      const by: Record<string, Drain[]> = {};
      for (let r = 0; r < P.runs; r++) {
        for (const processes of P.ioProcesses) {
          const d = await oursDrain(await freshOurs(), {
            topic: 'bench.sleep',
            count: P.ioMessages,
            processes,
            env: { BENCH_SLEEP_MS: String(P.ioSleepMs) },
          });
          (by[processes] ??= []).push({ perSecond: d.perSecond, drainSeconds: d.drainSeconds });
          log(`   ${processes} process(es), ${P.ioSleepMs} ms handler: ${Math.round(d.perSecond)} msg/s`);
        }
      }
      const byProcesses = Object.fromEntries(Object.entries(by).map(([k, v]) => [k, repeatOf(v)]));
      const one = byProcesses['1']!.median.perSecond;
      results.io = {
        byProcesses,
        scaling: Object.fromEntries(Object.entries(byProcesses).map(([k, v]) => [`x${k}`, round(v.median.perSecond / one, 3)])),
      };
    });

    await section('relay', async () => {
      if (!natsServer) {
        results.relay = null;
        return;
      }
      const relay: Drain[] = [];
      const floor: Drain[] = [];
      const replicated: Drain[] = [];
      const show = (who: string, d: Drain) => log(`   ${who}: ${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`);
      // Interleaved; each measurement on a fresh database and into a fresh nats-server (empty store).
      const withNats = async <T>(fn: (url: string) => Promise<T>) => {
        const nats = await startNatsServer();
        try {
          return await fn(nats.url);
        } finally {
          await nats.stop();
        }
      };
      // A run that lost or doubled messages is not measured, it is broken.
      const check = (what: string, r: number, stored: number | null) => {
        if (stored !== P.relayMessages)
          throw new Error(`${what} run ${r + 1}: ${stored} messages in the stream, ${P.relayMessages} published`);
      };
      for (let r = 0; r < P.runs; r++) {
        const d = await withNats(async (natsUrl) =>
          relayDrain({ databaseUrl: await freshOurs(), count: P.relayMessages, handler: 'relay', natsUrl }),
        );
        check('relay', r, d.streamMessages);
        relay.push({ perSecond: d.perSecond, drainSeconds: d.seconds });
        show('relay into JetStream', relay.at(-1)!);
        const f = await withNats(async (natsUrl) => relayFloor({ databaseUrl: await freshOurs(), natsUrl, count: P.relayMessages }));
        check('relay floor', r, f.streamMessages);
        floor.push({ perSecond: f.perSecond, drainSeconds: f.seconds });
        show(`relay floor (bare JetStream client, ${RELAY_CONCURRENCY} in flight)`, floor.at(-1)!);
        // The same relay into a fresh three-node cluster, the stream at three replicas: each PubAck
        // waits for a majority of the replicas (in memory: Debian's 2.9 cannot fsync every write).
        const cluster = await startNatsCluster();
        try {
          const c = await relayDrain({
            databaseUrl: await freshOurs(),
            count: P.relayMessages,
            handler: 'relay',
            natsUrl: cluster.url,
            replicas: 3,
          });
          check('relay at 3 replicas', r, c.streamMessages);
          replicated.push({ perSecond: c.perSecond, drainSeconds: c.seconds });
          show('relay into a 3-node cluster, 3 replicas', replicated.at(-1)!);
        } finally {
          await cluster.stop();
        }
      }
      const d = repeatOf(relay);
      const f = repeatOf(floor);
      const c = repeatOf(replicated);
      results.relay = {
        messages: P.relayMessages,
        relay: d,
        floor: f,
        ratio: round(d.median.perSecond / f.median.perSecond, 3),
        replicated: c,
        replicatedRatio: round(c.median.perSecond / d.median.perSecond, 3),
      };
      log(`   relay / relay floor: ${results.relay.ratio}×; 3 replicas / 1: ${results.relay.replicatedRatio}×`);
    });

    await section('webhooks', async () => {
      const throughput: { perSecond: number; seconds: number }[] = [];
      const isolation: { aloneP50: number; aloneP99: number; besideP50: number; besideP99: number; p99Ratio: number }[] = [];
      const perAttempt: { perSecond: number; seconds: number }[] = [];
      for (let r = 0; r < P.runs; r++) {
        // Kept-alive connections (the default) and a new connection per attempt, turn about.
        for (const keepAlive of r % 2 === 0 ? [true, false] : [false, true]) {
          const t = await webhookThroughput(await freshOurs(), P.webhookDeliveries, { WEBHOOK_KEEP_ALIVE: String(keepAlive) });
          (keepAlive ? throughput : perAttempt).push({ perSecond: t.perSecond, seconds: t.seconds });
          log(
            `   webhooks to a no-op receiver, ${keepAlive ? 'kept-alive connections' : 'a connection per attempt'}: ${t.perSecond} deliveries/s (${t.seconds} s, ${t.endpoints} endpoints, ${t.connections} connections)`,
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
      const noop = results.drain?.configs.ours1?.runs.median.perSecond;
      results.webhooks = {
        deliveries: P.webhookDeliveries,
        throughput: tp,
        throughputPerAttemptConnection: pa,
        keepAliveRatio: round(tp.median.perSecond / pa.median.perSecond, 3),
        ratioToNoopDrain: noop ? round(tp.median.perSecond / noop, 3) : null,
        isolation: repeatOf(isolation),
      };
    });

    await section('tracing', async () => {
      results.tracing = await tracingSection({
        runs: P.runs,
        connections: PREPARED_CONNECTIONS,
        httpSeconds: P.httpSeconds,
        drainMessages: P.drainMessages,
        sizes: { guests: P.apiGuests, properties: P.apiProperties },
        logDir: server.dir,
        freshDatabase: (name) => server.createDatabase(name, server.ourTemplate),
        log,
      });
    });

    await section('noisy', async () => {
      const np = flags.smoke ? NOISY_SMOKE : NOISY_FULL;
      const runs: Record<NoisyMode, NoisyRun[]> = { quiet: [], fair: [], fifo: [] };
      for (let r = 0; r < Math.min(P.runs, 3); r++) {
        for (const mode of ['quiet', 'fair', 'fifo'] as const) {
          const m = await noisyNeighbour(await freshOurs(), mode, np);
          runs[mode].push(m);
          log(
            `   noisy neighbour, ${mode}: booking email p50/p99 ${m.p50Ms}/${m.p99Ms} ms (${m.bookings} bookings), flood ${m.floodPerSecond}/s`,
          );
        }
      }
      results.noisy = noisyResult(np, runs);
    });

    await section('api', async () => {
      const apiUrl = await server.createDatabase('stayhub_api', server.ourTemplate);
      const fixture: ApiFixture = await startApi(apiUrl, { guests: P.apiGuests, properties: P.apiProperties }, server.dir);
      const pooledUrl = await server.createDatabase('stayhub_api_pooled', server.ourTemplate);
      const pooledFixture = await startPooledApi(pooledUrl, { guests: P.apiGuests, properties: P.apiProperties }, server.dir).catch(
        async (e: unknown) => {
          await fixture.close();
          throw e;
        },
      );
      if (!pooledFixture) log('   pgbouncer not found (apt-get install -y pgbouncer): the API through PgBouncer is not measured');
      const pooled: Record<number, { rps: number; p99: number }[]> = {};
      let pooledNon201 = 0;
      try {
        // Warm-up: JIT, pool connections, plan caches.
        await apiBookings(fixture, 8, Math.min(2, P.httpSeconds));
        if (pooledFixture) await apiBookings(pooledFixture, 8, Math.min(2, P.httpSeconds));
        const api: Record<number, { rps: number; p99: number }[]> = {};
        const bench: Record<number, { tps: number; p99: number }[]> = {};
        const prepared: { tps: number; p99: number }[] = [];
        let non201 = 0;
        for (let r = 0; r < P.runs; r++) {
          for (const c of P.connections) {
            const a = await apiBookings(fixture, c, P.httpSeconds);
            non201 += a.non201;
            (api[c] ??= []).push({ rps: a.rps, p99: a.p99 });
            let line = `   ${c} conn: API ${a.rps} req/s p99 ${a.p99} ms`;
            if (pooledFixture) {
              const p = await apiBookings(pooledFixture, c, P.httpSeconds);
              pooledNon201 += p.non201;
              (pooled[c] ??= []).push({ rps: p.rps, p99: p.p99 });
              line += ` | through PgBouncer ${p.rps} req/s p99 ${p.p99} ms`;
            }
            if (pgbench) {
              const b = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, undefined, P.pgbenchTransactions);
              (bench[c] ??= []).push({ tps: b.tps, p99: b.p99 });
              line += ` | pgbench ${b.tps} tps p99 ${b.p99} ms`;
              if (c === PREPARED_CONNECTIONS) {
                const bp = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, undefined, P.pgbenchTransactions, 'prepared');
                prepared.push({ tps: bp.tps, p99: bp.p99 });
                line += ` | pgbench -M prepared ${bp.tps} tps`;
              }
            }
            log(line);
          }
        }
        results.api = {
          byConnections: P.connections.map((c) => {
            const a = repeatOf(api[c]!);
            const b = bench[c] ? repeatOf(bench[c]!) : null;
            return { connections: c, api: a, pgbench: b, ratio: b ? round(a.median.rps / b.median.tps, 3) : null };
          }),
          non201,
          prepared: null,
          pooled: pooledFixture
            ? {
                serverConnections: POOLED_SERVER_CONNECTIONS,
                byConnections: P.connections.map((c) => {
                  const p = repeatOf(pooled[c]!);
                  return { connections: c, pooled: p, ratio: round(p.median.rps / repeatOf(api[c]!).median.rps, 3) };
                }),
                non201: pooledNon201,
              }
            : null,
        };
        for (const p of results.api.pooled?.byConnections ?? []) {
          log(`   through PgBouncer / direct at ${p.connections} connections: ${p.ratio}×`);
        }
        if (prepared.length > 0) {
          const b = repeatOf(prepared);
          const a = repeatOf(api[PREPARED_CONNECTIONS]!);
          results.api.prepared = { connections: PREPARED_CONNECTIONS, pgbench: b, ratio: round(a.median.rps / b.median.tps, 3) };
          log(`   API / pgbench -M prepared at ${PREPARED_CONNECTIONS} connections: ${results.api.prepared.ratio}×`);
        }

        if (pgbench) {
          const withOutbox: { tps: number; p99: number }[] = [];
          const withoutOutbox: { tps: number; p99: number }[] = [];
          const noNotify: { tps: number; p99: number }[] = [];
          const notifyAfter: { tps: number; p99: number }[] = [];
          const c = P.outboxCostClients;
          for (let r = 0; r < P.runs; r++) {
            const w = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, undefined, P.pgbenchTransactions);
            const wo = await pgbenchBookings(fixture, c, P.pgbenchSeconds, false, undefined, P.pgbenchTransactions);
            // Diagnostics: which part of the outbox costs what (the row, or the NOTIFY at COMMIT).
            const nn = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, 'no-notify', P.pgbenchTransactions);
            const na = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, 'in-transaction', P.pgbenchTransactions);
            withOutbox.push({ tps: w.tps, p99: w.p99 });
            withoutOutbox.push({ tps: wo.tps, p99: wo.p99 });
            noNotify.push({ tps: nn.tps, p99: nn.p99 });
            notifyAfter.push({ tps: na.tps, p99: na.p99 });
            log(
              `   outbox cost: ${w.tps} tps with, ${wo.tps} without; row without notify ${nn.tps}, notify inside the transaction ${na.tps}`,
            );
          }
          const w = repeatOf(withOutbox);
          const wo = repeatOf(withoutOutbox);
          const ratio = round(w.median.tps / wo.median.tps, 3);
          const nn = repeatOf(noNotify);
          const na = repeatOf(notifyAfter);
          results.outboxCost = {
            clients: c,
            withOutbox: w,
            withoutOutbox: wo,
            ratio,
            costPercent: round(100 * (1 - ratio), 1),
            diagnostics: {
              rowWithoutNotify: nn,
              notifyInTransaction: na,
              rowWithoutNotifyCostPercent: round(100 * (1 - nn.median.tps / wo.median.tps), 1),
              notifyInTransactionCostPercent: round(100 * (1 - na.median.tps / wo.median.tps), 1),
            },
          };
        } else {
          results.outboxCost = null;
        }

        const conflictRuns = [];
        for (let r = 0; r < P.runs; r++) {
          const c = await apiConflicts(fixture, P.conflictConnections, P.httpSeconds);
          conflictRuns.push(c);
          log(
            `   conflicts: ${c.rps} req/s, ${c.rounds} rounds, ${c.share409} % 409, ${c.created201} × 201 (${c.bookingsKept} kept, at most ${c.maxWinnersPerRound} a round), ${c.server5xx} × 5xx, ${c.other} other`,
          );
        }
        results.conflicts = {
          connections: P.conflictConnections,
          runs: repeatOf(
            conflictRuns.map((c) => ({
              rps: c.rps,
              p99: c.p99,
              share409: c.share409,
              server5xx: c.server5xx,
              created201: c.created201,
              conflict409: c.conflict409,
              other: c.other,
              requests: c.requests,
              rounds: c.rounds,
              bookingsKept: c.bookingsKept,
              maxWinnersPerRound: c.maxWinnersPerRound,
            })),
          ),
          expectedShare409: round(100 * (1 - 1 / P.conflictConnections), 2),
        };
      } finally {
        await fixture.close();
        await pooledFixture?.close();
      }
    });

    // Templates holding a DONE history, built once per size and cloned for every measurement.
    const historyTemplates = new Map<number, Promise<{ db: string; history: HistoryDay }>>();
    const historyTemplate = (rows: number) => {
      let template = historyTemplates.get(rows);
      if (!template) {
        template = (async () => {
          const t = Date.now();
          const db = `history_${rows}`;
          const history = await fillDoneHistory(await server.createDatabase(db, server.ourTemplate), rows);
          log(
            `   template ${db}: ${rows.toLocaleString('en-US')} DONE rows in ${history.partition}, ${((Date.now() - t) / 1000).toFixed(1)} s`,
          );
          return { db, history };
        })();
        historyTemplates.set(rows, template);
      }
      return template;
    };
    /** `fn` on a fresh clone of the history of `rows` DONE rows, dropped after (clones of 400 MB add up). */
    const onHistory = async <T>(rows: number, fn: (url: string, history: HistoryDay) => Promise<T>): Promise<T> => {
      const name = `history_${rows}_${dbSeq++}`;
      const { db, history } = await historyTemplate(rows);
      const url = await cloneDatabase(server, name, db);
      try {
        return await fn(url, history);
      } finally {
        await dropDatabase(server, name);
      }
    };
    const drainOurs = (url: string, count: number, processes: number, onStarted?: () => void) =>
      oursDrain(url, { topic: 'bench.noop', count, processes, env: OURS_THROUGHPUT, onStarted });
    const claimLat = async (url: string): Promise<ClaimLat> => {
      const ms = await claimTimes(url, P.purgeClaimSamples, P.claimBatch);
      return { p50: percentile(ms, 50), p99: percentile(ms, 99) };
    };
    const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

    await section('purge', async () => {
      const rows = P.purgeRows;
      const deletes: PurgeCost[] = [];
      const drops: DropCost[] = [];
      const largeDrops: DropCost[] = [];
      const drainsAlone: Drain[] = [];
      const drainsBeside: Record<PurgeWay, (Drain & Beside)[]> = { delete: [], drop: [] };
      const claimsAlone: ClaimLat[] = [];
      const claimsBeside: Record<PurgeWay, (ClaimLat & Beside)[]> = { delete: [], drop: [] };
      const WAY = { delete: 'the DELETE', drop: 'the partition DROP' } as const;
      /**
       * `measure` with a purge of the history beside it (history.ts concurrentPurge), started when
       * `measure` calls `start` (a drain: when its clock starts) and stopped when it ends.
       */
      const beside = async <T>(url: string, history: HistoryDay, way: PurgeWay, measure: (start: () => void) => Promise<T>) => {
        const started: { purge?: ReturnType<typeof concurrentPurge> } = {};
        const inDay = way === 'drop' ? await rowsInDay(url, history) : history.rows;
        const m = await measure(() => {
          started.purge = concurrentPurge(url, history, way, inDay);
        }).catch(async (err: unknown) => {
          await started.purge?.stop();
          throw err;
        });
        if (!started.purge) throw new Error('the purge beside the measurement never started');
        return { ...m, ...(await started.purge.stop()) };
      };
      const besideLine = (b: Beside) =>
        `${b.purged.toLocaleString('en-US')} rows, purge ${Math.round(b.purgeMs)} ms of the measurement's ${Math.round(b.measuredMs)} ms`;
      for (let r = 0; r < P.historyRuns; r++) {
        // A clone each, the one drained first taking turns, so none always gets the warmer machine.
        const order = (['alone', 'delete', 'drop'] as const).map((_, i, a) => a[(i + r) % a.length]!);
        for (const way of order) {
          await onHistory(rows, async (url, history) => {
            if (way === 'alone') {
              drainsAlone.push(await drainOurs(url, P.purgeDrainMessages, 1));
              log(`   drain ×1 alone: ${Math.round(drainsAlone.at(-1)!.perSecond)} msg/s`);
              return;
            }
            const d = await beside(url, history, way, (start) => drainOurs(url, P.purgeDrainMessages, 1, start));
            drainsBeside[way].push(d);
            log(`   drain ×1 beside ${WAY[way]}: ${Math.round(d.perSecond)} msg/s (${besideLine(d)})`);
          });
        }
        // One clone: the claims are rolled back, so each set sees the same PENDING rows; the DELETE
        // before the DROP, which leaves nothing to delete (the DROP then takes fewer rows).
        await onHistory(rows, async (url, history) => {
          await addPending(url, P.claimPending);
          claimsAlone.push(await claimLat(url));
          for (const way of ['delete', 'drop'] as const) {
            claimsBeside[way].push(
              await beside(url, history, way, (start) => {
                start();
                return claimLat(url);
              }),
            );
          }
          const [a, d, p] = [claimsAlone.at(-1)!, claimsBeside.delete.at(-1)!, claimsBeside.drop.at(-1)!];
          const ms = (c: ClaimLat) => `${c.p50.toFixed(3)}/${c.p99.toFixed(3)} ms`;
          log(
            `   claim p50/p99: alone ${ms(a)}, beside the DELETE ${ms(d)} (${besideLine(d)}), beside the DROP ${ms(p)} (${besideLine(p)})`,
          );
        });
        // Each purge alone on a fresh clone, nothing else on the server, with PENDING rows in
        // today's partition as a live outbox has (neither purge may touch them).
        await onHistory(rows, async (url, history) => {
          await addPending(url, P.claimPending);
          deletes.push(await purgeCost(url, history));
          const p = deletes.at(-1)!;
          log(
            `   DELETE of ${p.rows.toLocaleString('en-US')} rows: ${p.seconds.toFixed(1)} s (a batch ${p.firstBatchesMs.toFixed(1)} ms at first, ${p.lastBatchesMs.toFixed(1)} ms at the end), ${mib(p.walBytes)} WAL; outbox ${mib(p.tableBytesBefore)} → ${mib(p.tableBytesAfter)}, ${mib(p.tableBytesAfterVacuum)} after VACUUM (${p.vacuumSeconds.toFixed(1)} s)`,
          );
        });
        const dropLine = (d: DropCost) =>
          `${d.rows.toLocaleString('en-US')} rows (${mib(d.partitionBytes)}): ${d.ms.toFixed(1)} ms (statistics ${d.statsMs.toFixed(1)}, detach ${d.detachMs.toFixed(1)}, drop ${d.dropMs.toFixed(1)}), ${(d.walBytes / 1024).toFixed(1)} KiB WAL; outbox ${mib(d.tableBytesBefore)} → ${mib(d.tableBytesAfter)}`;
        for (const [size, into] of [
          [rows, drops],
          [P.purgeLargeRows, largeDrops],
        ] as const) {
          await onHistory(size, async (url, history) => {
            await addPending(url, P.claimPending);
            into.push(await dropPartitionCost(url, history));
            log(`   DROP of the partition of ${dropLine(into.at(-1)!)}`);
          });
        }
      }
      // The larger day serves nothing else: its template (GBs) goes now.
      await dropDatabase(server, (await historyTemplate(P.purgeLargeRows)).db);
      historyTemplates.delete(P.purgeLargeRows);

      const da = repeatOf(drainsAlone);
      const dd = repeatOf(drainsBeside.delete);
      const dp = repeatOf(drainsBeside.drop);
      const ca = repeatOf(claimsAlone);
      const cd = repeatOf(claimsBeside.delete);
      const cp = repeatOf(claimsBeside.drop);
      results.purge = {
        rows,
        deleteRows: repeatOf(deletes),
        dropPartition: repeatOf(drops),
        dropLargePartition: { rows: P.purgeLargeRows, runs: repeatOf(largeDrops) },
        drain: {
          messages: P.purgeDrainMessages,
          alone: da,
          besideDelete: dd,
          besideDrop: dp,
          deleteRatio: round(dd.median.perSecond / da.median.perSecond, 3),
          dropRatio: round(dp.median.perSecond / da.median.perSecond, 3),
        },
        claim: {
          samples: P.purgeClaimSamples,
          pending: P.claimPending,
          alone: ca,
          besideDelete: cd,
          besideDrop: cp,
          deleteP50Ratio: round(cd.median.p50 / ca.median.p50, 3),
          deleteP99Ratio: round(cd.median.p99 / ca.median.p99, 3),
          dropP50Ratio: round(cp.median.p50 / ca.median.p50, 3),
          dropP99Ratio: round(cp.median.p99 / ca.median.p99, 3),
        },
      };
      const { drain, claim } = results.purge;
      log(
        `   beside / alone: the DELETE: drain ${drain.deleteRatio}×, claim p50 ${claim.deleteP50Ratio}×, p99 ${claim.deleteP99Ratio}×; the partition DROP: drain ${drain.dropRatio}×, claim p50 ${claim.dropP50Ratio}×, p99 ${claim.dropP99Ratio}×`,
      );
    });

    await section('growth', async () => {
      const drains: Record<number, Record<number, Drain[]>> = {};
      const claims: Record<number, { ms: number }[]> = {};
      for (let r = 0; r < P.historyRuns; r++) {
        for (const history of P.growthHistories) {
          const ms = await onHistory(history, async (url) => {
            await addPending(url, P.claimPending);
            return timeClaims(url, P.claimSamples, P.claimBatch);
          });
          (claims[history] ??= []).push({ ms });
          const line = [];
          for (const processes of P.growthProcesses) {
            const d = await onHistory(history, (url) => drainOurs(url, P.growthMessages, processes));
            ((drains[history] ??= {})[processes] ??= []).push(d);
            line.push(`×${processes} ${Math.round(d.perSecond)}`);
          }
          log(`   ${history.toLocaleString('en-US')} DONE: drain msg/s ${line.join(', ')}; claim ${ms.toFixed(3)} ms`);
        }
      }
      results.growth = {
        messages: P.growthMessages,
        byHistory: P.growthHistories.map((history) => ({
          history,
          byProcesses: Object.fromEntries(Object.entries(drains[history]!).map(([k, v]) => [k, repeatOf(v)])),
          claimMs: repeatOf(claims[history]!),
        })),
      };
    });

    await section('api-history', async () => {
      const t = Date.now();
      const historyUrl = await server.createDatabase('api_history', server.ourTemplate);
      await fillBookingHistory(historyUrl, P.bookingHistory);
      log(`   ${P.bookingHistory.toLocaleString('en-US')} past bookings inserted in ${((Date.now() - t) / 1000).toFixed(1)} s`);
      const emptyUrl = await server.createDatabase('api_empty', server.ourTemplate);
      const sizes = { guests: P.apiGuests, properties: P.apiProperties };
      // Each API its own log file: startApi writes api.log in the folder it is given.
      const logDir = (name: string) => {
        const dir = path.join(server.dir, name);
        mkdirSync(dir, { recursive: true });
        return dir;
      };
      const empty = await startApi(emptyUrl, sizes, logDir('api-empty'));
      try {
        const history = await startApi(historyUrl, sizes, logDir('api-history'));
        try {
          const c = PREPARED_CONNECTIONS;
          // Warm-up: JIT, pool connections, plan caches.
          for (const f of [empty, history]) await apiBookings(f, c, Math.min(2, P.httpSeconds));
          const runs: Record<'empty' | 'history', ApiLat[]> = { empty: [], history: [] };
          let non201 = 0;
          for (let r = 0; r < P.runs; r++) {
            for (const which of r % 2 === 0 ? (['empty', 'history'] as const) : (['history', 'empty'] as const)) {
              const a = await apiBookings(which === 'empty' ? empty : history, c, P.httpSeconds);
              non201 += a.non201;
              runs[which].push({ rps: a.rps, p50: a.p50, p99: a.p99 });
              log(
                `   ${which === 'empty' ? 'empty bookings table' : `${P.bookingHistory.toLocaleString('en-US')} past bookings`}: ${a.rps} req/s, p50 ${a.p50} ms, p99 ${a.p99} ms`,
              );
            }
          }
          const e = repeatOf(runs.empty);
          const h = repeatOf(runs.history);
          results.apiHistory = {
            connections: c,
            bookings: P.bookingHistory,
            empty: e,
            history: h,
            p50Ratio: round(h.median.p50 / e.median.p50, 3),
            p99Ratio: round(h.median.p99 / e.median.p99, 3),
            non201,
          };
          log(`   with history / empty: p50 ${results.apiHistory.p50Ratio}×, p99 ${results.apiHistory.p99Ratio}×`);
        } finally {
          await history.close();
        }
      } finally {
        await empty.close();
      }
    });

    await section('overload', async () => {
      results.setup.overload = OVERLOAD_SETUP;
      const freshDb = (name: string) => server.createDatabase(name, server.ourTemplate);
      results.overload = await overloadSection({ smoke: !!flags.smoke, freshDb, logDir: server.dir, log });
    });
  } finally {
    const t = Date.now();
    await server.stop();
    log(`postgres stopped in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  }

  results.durationSeconds = Math.round((Date.now() - t0) / 1000);
  results.targets = evaluateTargets(results);
  mkdirSync(outDir, { recursive: true });
  writeFileSync(path.join(outDir, 'bench-results.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(path.join(outDir, 'bench-results.md'), renderMarkdown(results));
  log(`wrote ${path.join(outDir, 'bench-results.json')} and bench-results.md in ${results.durationSeconds} s`);
  for (const t of results.targets) log(`   ${t.met === null ? '  ?' : t.met ? ' ok' : 'MISS'}  ${t.name}: ${t.value} (target ${t.target})`);
  if (results.errors.length) log(`${results.errors.length} section(s) failed: ${results.errors.map((e) => e.section).join(', ')}`);
  return results.errors.length ? 1 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
