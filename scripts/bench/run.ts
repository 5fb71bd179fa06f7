import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { apiBookings, apiConflicts, pgbenchBookings, startApi, useFixedRequestCounts, type ApiFixture } from './api.ts';
import { pgbenchVersion, PGBENCH_INSTALL_HINT } from './lib/pgbench.ts';
import { parseFlags, usageError } from './lib/cli.ts';
import { machine, postgresSettings, startServer, versions, type BenchServer } from './lib/server.ts';
import { ratiosOf, repeat, repeatOf, round, type Ratios, type Repeated } from './lib/stats.ts';
import { graphileBurst, oursBurst, pgBossBurst, type Burst } from './burst.ts';
import { codeVersion, loadBefore } from './lib/trace.ts';
import { explainClaim, oursDrain, oursLatency, prepareClaimTables, timeClaims } from './ours.ts';
import { DEFAULT_OUT, FULL, SECTIONS, SMOKE, type BenchParams } from './params.ts';
import { graphileDrain, graphileLatency, setupGraphile } from './peers/graphile.ts';
import { PGBOSS_BATCH, PGBOSS_POLL_SECONDS, pgBossDrain, pgBossLatency, setupPgBoss } from './peers/pgboss.ts';
import { NATS_INSTALL_HINT, natsServerVersion, relayDrain, startNatsServer } from './relay.ts';
import { renderMarkdown } from './report.ts';
import { evaluateTargets } from './targets.ts';

/*
 * `npm run bench` (about 10–15 minutes) and `npm run bench -- --smoke` (`npm run bench:smoke`,
 * about 30–60 s): one embedded PostgreSQL with default settings, every system in its own database
 * on it, each measurement repeated (FULL.runs times in the full run) and reported as the median of
 * its runs. Writes bench-results.json and bench-results.md to var/bench/ (git-ignored: a run's
 * figures are data, not source), or to --out DIR. Flags: USAGE below.
 *
 * The same rules for every system: a fresh database for every run of every system (cloned from a
 * template with its schema), the same start of the clock (first handler entered, or the burst's
 * COMMIT) and the same end (nothing pending, seen by one observer: lib/settled.ts), runs of all
 * systems interleaved, every configuration's own ratio to each peer reported (a "best of ours"
 * row is labelled as such), each median with its min–max, the commit and the load average before
 * each section (flagged when it exceeded the cores).
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
  BENCH_BURST_TRACE=1           log the outbox every 500 ms during each burst
  BENCH_WORKER_STDIO=inherit    show our burst workers' own logs
`;

const flags = parseFlags('bench', USAGE, { smoke: { type: 'boolean' }, out: { type: 'string' }, only: { type: 'string' } });
const only = flags.only === undefined ? undefined : new Set(flags.only.split(',').map((s) => s.trim()));
for (const name of only ?? []) {
  if (!(SECTIONS as readonly string[]).includes(name)) usageError('bench', USAGE, `--only: unknown section "${name}"`);
}
const P: BenchParams = flags.smoke ? SMOKE : FULL;
const outDir = path.resolve(flags.out ?? DEFAULT_OUT);
useFixedRequestCounts(P.httpRequestsPerConnection);

/** Where the API is also compared with pgbench -M prepared: the target's connection count. */
const PREPARED_CONNECTIONS = 8;

/**
 * Our worker set up for throughput, as the peers are set up by their authors' recommendations: a
 * larger claim (fewer claim commits per message) and more handlers in flight. The defaults (20/8)
 * suit email handlers talking to one SMTP server; a no-op drain measures the queue itself.
 */
const OURS_THROUGHPUT = { WORKER_BATCH_SIZE: '500', WORKER_CONCURRENCY: '32' };

const t0 = Date.now();
const log = (msg: string) => process.stdout.write(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${msg}\n`);

type Drain = { perSecond: number; drainSeconds: number };

type Lat = { p50: number; p99: number; max: number; mean: number };

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
  drain?: {
    ours1: Repeated<Drain>;
    ours2: Repeated<Drain>;
    /** One process as a user gets it: default WORKER_BATCH_SIZE / WORKER_CONCURRENCY and LOG_LEVEL=info. */
    ours1Default: Repeated<Drain>;
    graphile: Repeated<Drain>;
    pgBoss: Repeated<Drain>;
    ratios: Ratios;
  };
  burst?: {
    messages: number;
    systems: Record<string, Repeated<Burst>>;
    ratios: Ratios;
  };
  latency?: { ours: Repeated<Lat>; graphile: Repeated<Lat>; pgBoss: Repeated<Lat> };
  /** The events relay (scripts/bench/relay.ts) against a no-op drain of the same backlog; null: nats-server not installed. */
  relay?: {
    messages: number;
    noop: Repeated<Drain>;
    relay: Repeated<Drain>;
    /** Median relay msg/s over median no-op msg/s (target ≥ 0.5). */
    ratio: number;
  } | null;
  io?: { byProcesses: Record<string, Repeated<Drain>>; scaling: Record<string, number> };
  api?: {
    byConnections: {
      connections: number;
      api: Repeated<{ rps: number; p99: number }>;
      pgbench: Repeated<{ tps: number; p99: number }> | null;
      ratio: number | null;
    }[];
    non201: number;
    /**
     * The stricter comparison at 8 connections: pgbench with `-M prepared`, the protocol of the
     * API's named booking statements (parsed once per connection). Reported beside the target,
     * whose peer is pgbench -M extended (what node-postgres sends for a parameterised query).
     */
    prepared: { connections: number; pgbench: Repeated<{ tps: number; p99: number }>; ratio: number } | null;
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
      ours: `scripts/bench/bench-worker.ts (= src/worker/drain-outbox.ts + bench handlers), --until-empty, LOG_LEVEL=warn; drain: our throughput settings WORKER_BATCH_SIZE=${OURS_THROUGHPUT.WORKER_BATCH_SIZE} WORKER_CONCURRENCY=${OURS_THROUGHPUT.WORKER_CONCURRENCY} (as the peers run with their authors' throughput settings); I/O scaling: the defaults (20/8)`,
      drainClock:
        'from the first handler entered (any process) to nothing pending, seen by one observer polling every 10 ms (the same for every system); messages committed before; a fresh database for every run of every system',
      burst: `every system started in its long-running mode and idle (listening or polling, a warm-up of 100 handled, 1 s idle), then ${P.burstMessages.toLocaleString('en-US')} no-op messages committed in one statement; clock from that COMMIT to nothing pending (same observer); ours with our throughput settings and LOG_LEVEL=warn, graphile-worker perfTest settings, pg-boss batch ${PGBOSS_BATCH} poll ${PGBOSS_POLL_SECONDS} s`,
      graphileWorker: `${P.graphileProcesses} × graphile-worker --once, perfTest settings: concurrentJobs 24, maxPoolSize 25, localQueue 500 (refetch 10 ms), completeJobBatchDelay 0`,
      pgBoss: `work() with batchSize ${PGBOSS_BATCH}, pollingIntervalSeconds ${PGBOSS_POLL_SECONDS}; supervise and schedule off`,
      latency: 'in-process worker, idle, one message per transaction; clock from COMMIT sent to handler entered',
      relay: `in-process worker (createWorker, batch 500, concurrency 32, LOG_LEVEL=warn), ${P.relayMessages.toLocaleString('en-US')} booking.created messages committed before the clock starts; its only handler a no-op, or the events relay publishing each into JetStream and awaiting its PubAck (a fresh nats-server -js with file storage for every relay run, EVENTS_PUBLISH_TIMEOUT_MS default); clock from the first claim to nothing pending; a fresh database for every run`,
      api: 'node --import tsx src/http/server.ts (own process, LOG_LEVEL=warn, DB_POOL_MAX default), autocannon in the bench process',
      pgbench:
        '-M extended (and -M prepared at 8 connections, the stricter peer), the booking transaction of src/bookings/booking.service.ts as SQL (scripts/bench/api.ts bookingScript)',
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

    await section('drain', async () => {
      const ours1: Drain[] = [];
      const ours2: Drain[] = [];
      const ours1Default: Drain[] = [];
      const graphile: Drain[] = [];
      const pgBoss: Drain[] = [];
      const show = (who: string, d: Drain) => log(`   ${who}: ${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`);
      // Interleaved, so a slow phase of a shared machine does not land on one system only.
      for (let r = 0; r < P.runs; r++) {
        ours1.push(await oursDrain(await freshOurs(), { topic: 'bench.noop', count: P.drainMessages, processes: 1, env: OURS_THROUGHPUT }));
        show('ours ×1', ours1.at(-1)!);
        ours2.push(await oursDrain(await freshOurs(), { topic: 'bench.noop', count: P.drainMessages, processes: 2, env: OURS_THROUGHPUT }));
        show('ours ×2', ours2.at(-1)!);
        // One process at the defaults and the default log level: what a user gets without tuning.
        ours1Default.push(
          await oursDrain(await freshOurs(), { topic: 'bench.noop', count: P.drainMessages, processes: 1, env: { LOG_LEVEL: 'info' } }),
        );
        show('ours ×1, defaults, LOG_LEVEL=info', ours1Default.at(-1)!);
        graphile.push(await graphileDrain(await freshGraphile(), P.drainMessages, P.graphileProcesses));
        show('graphile-worker', graphile.at(-1)!);
        pgBoss.push(await pgBossDrain(await freshPgBoss(), P.drainMessages, r));
        show('pg-boss', pgBoss.at(-1)!);
      }
      const d = {
        ours1: repeatOf(ours1),
        ours2: repeatOf(ours2),
        ours1Default: repeatOf(ours1Default),
        graphile: repeatOf(graphile),
        pgBoss: repeatOf(pgBoss),
      };
      results.drain = {
        ...d,
        // The best-of-ours row is over our throughput settings (×1, ×2), the configurations the
        // drain target compares; the defaults row has its own ratios.
        ratios: {
          ...ratiosOf(
            { ours1: d.ours1.median.perSecond, ours2: d.ours2.median.perSecond },
            { graphile: d.graphile.median.perSecond, pgBoss: d.pgBoss.median.perSecond },
          ),
          ours1Default: ratiosOf(
            { x: d.ours1Default.median.perSecond },
            { graphile: d.graphile.median.perSecond, pgBoss: d.pgBoss.median.perSecond },
          ).x!,
        },
      };
    });

    await section('burst', async () => {
      const runs: Record<string, Burst[]> = {
        ours1: [],
        ours2: [],
        ...Object.fromEntries(P.burstGraphileProcesses.map((n) => [`graphile${n}`, []])),
        pgBoss: [],
      };
      const show = (who: string, b: Burst) => log(`   ${who}: ${Math.round(b.perSecond)} msg/s (${b.seconds.toFixed(2)} s from COMMIT)`);
      for (let r = 0; r < P.runs; r++) {
        runs.ours1!.push(await oursBurst(await freshOurs(), P.burstMessages, 1, OURS_THROUGHPUT));
        show('ours ×1', runs.ours1!.at(-1)!);
        runs.ours2!.push(await oursBurst(await freshOurs(), P.burstMessages, 2, OURS_THROUGHPUT));
        show('ours ×2', runs.ours2!.at(-1)!);
        for (const n of P.burstGraphileProcesses) {
          runs[`graphile${n}`]!.push(await graphileBurst(await freshGraphile(), P.burstMessages, n));
          show(`graphile-worker ×${n}`, runs[`graphile${n}`]!.at(-1)!);
        }
        runs.pgBoss!.push(await pgBossBurst(await freshPgBoss(), P.burstMessages));
        show('pg-boss', runs.pgBoss!.at(-1)!);
      }
      const systems = Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, repeatOf(v)]));
      const med = (k: string) => systems[k]!.median.perSecond;
      results.burst = {
        messages: P.burstMessages,
        systems,
        ratios: ratiosOf(
          { ours1: med('ours1'), ours2: med('ours2') },
          Object.fromEntries(
            Object.keys(systems)
              .filter((k) => !k.startsWith('ours'))
              .map((k) => [k, med(k)]),
          ),
        ),
      };
    });

    await section('latency', async () => {
      const ours: Lat[] = [];
      const graphile: Lat[] = [];
      const pgBoss: Lat[] = [];
      const show = (who: string, l: Lat) => log(`   ${who}: p50 ${l.p50} ms, p99 ${l.p99} ms, max ${l.max} ms`);
      for (let r = 0; r < P.runs; r++) {
        ours.push(await oursLatency(await freshOurs(), P.latencySamples));
        show('ours', ours.at(-1)!);
        graphile.push(await graphileLatency(await freshGraphile(), P.latencySamples));
        show('graphile-worker', graphile.at(-1)!);
        pgBoss.push(await pgBossLatency(await freshPgBoss(), P.pgBossLatencySamples));
        show('pg-boss', pgBoss.at(-1)!);
      }
      results.latency = { ours: repeatOf(ours), graphile: repeatOf(graphile), pgBoss: repeatOf(pgBoss) };
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
      const noop: Drain[] = [];
      const relay: Drain[] = [];
      const show = (who: string, d: Drain) => log(`   ${who}: ${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`);
      // Interleaved, each on a fresh database; each relay run into a fresh nats-server (empty store).
      for (let r = 0; r < P.runs; r++) {
        const n = await relayDrain({ databaseUrl: await freshOurs(), count: P.relayMessages, handler: 'noop' });
        noop.push({ perSecond: n.perSecond, drainSeconds: n.seconds });
        show('no-op drain', noop.at(-1)!);
        const nats = await startNatsServer();
        try {
          const d = await relayDrain({ databaseUrl: await freshOurs(), count: P.relayMessages, handler: 'relay', natsUrl: nats.url });
          // A relay that lost or doubled messages is not measured, it is broken.
          if (d.streamMessages !== P.relayMessages)
            throw new Error(`relay run ${r + 1}: ${d.streamMessages} messages in the stream, ${P.relayMessages} relayed`);
          relay.push({ perSecond: d.perSecond, drainSeconds: d.seconds });
          show('relay into JetStream', relay.at(-1)!);
        } finally {
          await nats.stop();
        }
      }
      const n = repeatOf(noop);
      const d = repeatOf(relay);
      results.relay = { messages: P.relayMessages, noop: n, relay: d, ratio: round(d.median.perSecond / n.median.perSecond, 3) };
      log(`   relay / no-op: ${results.relay.ratio}×`);
    });

    await section('api', async () => {
      const apiUrl = await server.createDatabase('stayhub_api', server.ourTemplate);
      const fixture: ApiFixture = await startApi(apiUrl, { guests: P.apiGuests, properties: P.apiProperties }, server.dir);
      try {
        // Warm-up: JIT, pool connections, plan caches.
        await apiBookings(fixture, 8, Math.min(2, P.httpSeconds));
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
        };
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
      }
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
