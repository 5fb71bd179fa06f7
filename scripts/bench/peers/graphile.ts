import type { EventEmitter } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import pg from 'pg';
import { Logger, run, runMigrations, type Runner } from 'graphile-worker';
import { LatencyProbe } from '../lib/latency.ts';
import { withClient } from '../../lib/postgres.ts';
import { assertOk, ROOT, runParallel, runProcess } from '../../lib/processes.ts';
import { markDir, nowMs } from '../lib/marks.ts';
import { PENDING, watchSettled } from '../lib/settled.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { PEERS } from './guarantees.ts';

/**
 * graphile-worker, run both ways its authors support, with the settings of its own perfTest
 * (peers/graphile.config.cjs, perfTest's graphile.config.js):
 *
 * - the CLI, measured the way perfTest/run.js measures it: jobs are added before the clock
 *   starts, then PARALLELISM `graphile-worker --once` processes drain them (the burst section
 *   runs the CLI long-running instead);
 * - in-process `run({ preset, taskList })`, one runner in the bench's own process, as an
 *   application embeds it.
 *
 * perfTest subtracts a separately timed start-up; we start the clock at the first job handled
 * (lib/marks.ts) and stop it when no job is left (lib/settled.ts), the same rules as for every
 * system.
 *
 * Each way also `keyed`, the nearest graphile-worker comes to our guarantees: a job queue
 * (`queue_name`) per key, so the jobs of a key run one at a time, in order. The other two it
 * cannot give in any configuration, so its same-guarantee figures still carry neither: its
 * completion deletes the job by id alone (sql/completeJobs: a worker whose lock was reset can
 * complete the newer attempt), and a completed job is deleted, no history kept.
 */

/**
 * A configuration's key, system and label: the fastest (no queue), or (`keyed`) the same-guarantee
 * one (peers/guarantees.ts), whose key ends in Keyed and whose label says a queue per key.
 */
export const graphileConfig = (keyed: boolean) => ({
  key: (k: string) => (keyed ? `${k}Keyed` : k),
  system: keyed ? PEERS.graphile.same : PEERS.graphile.fastest,
  label: (l: string) => (keyed ? `${l}, a queue per key` : l),
});

export const GRAPHILE_CLI = path.join(ROOT, 'node_modules/graphile-worker/dist/cli.js');
export const GRAPHILE_CONFIG = path.join(ROOT, 'scripts/bench/peers/graphile.config.cjs');
const silent = new Logger(() => () => {});

const require = createRequire(import.meta.url);
/** The perfTest settings, read from the CLI's config file so both ways run with the same preset. */
const PERF_TEST = (require('./graphile.config.cjs') as { worker: GraphileConfig.WorkerOptions }).worker;
const { traceEvents } = require('./graphile-trace-events.cjs') as { traceEvents: (file: string) => EventEmitter };

/**
 * An in-process runner with the perfTest preset and one no-op task (`onJob` runs first in it). Its
 * own pool (maxPoolSize 25), LISTEN/NOTIFY, local queue and batched completion, as the CLI's.
 * `trace`: graphile-trace-events.cjs writes its events to that file.
 */
export async function startGraphileRunner(url: string, opts: { onJob?: () => void; trace?: string } = {}): Promise<Runner> {
  const { taskDirectory: _fromFiles, connectionString: _fromEnv, ...settings } = PERF_TEST;
  return run({
    preset: {
      worker: { ...settings, connectionString: url, logger: silent, ...(opts.trace ? { events: traceEvents(opts.trace) as never } : {}) },
    },
    taskList: { noop: async () => opts.onJob?.() },
    noHandleSignals: true,
  });
}

export async function setupGraphile(url: string): Promise<void> {
  await runMigrations({ connectionString: url, logger: silent });
}

const query = <T extends pg.QueryResultRow = any>(url: string, text: string, values: unknown[] = []) =>
  withClient(url, (c) => c.query<T>(text, values));

const onceProcesses = (url: string, parallel: number, markDirPath: string) =>
  runParallel(parallel, () =>
    runProcess(process.execPath, [GRAPHILE_CLI, '--once', '--config', GRAPHILE_CONFIG, '-c', url], {
      env: { NO_LOG_SUCCESS: '1', BENCH_MARK_DIR: markDirPath },
      timeoutMs: 600_000,
    }),
  );

/**
 * A job's queue_name: none (fastest: jobs run in any order), or (`keyed`, the same guarantee of
 * order as ours) a queue of its own per key, as graphile-worker's docs order jobs: its jobs run one
 * at a time, in order. The key as our messages have it: unique per message, time-ordered.
 */
const graphileQueueName = (keyed: boolean) =>
  keyed ? `lpad(to_hex((extract(epoch from clock_timestamp()) * 1000)::bigint), 12, '0') || '-' || gen_random_uuid()` : 'null';

/** `$1` no-op jobs in one add_jobs call, graphile-worker's bulk insert (add_job per row takes a minute for 20,000). */
export const addJobsSql = (keyed: boolean) =>
  `select graphile_worker.add_jobs(array(
     select row('noop', json_build_object('i', i), ${graphileQueueName(keyed)}, null, null, null, null, null)::graphile_worker.job_spec
       from generate_series(1, $1::int) i))`;

async function addJobs(url: string, jobs: number, keyed: boolean) {
  await query(url, addJobsSql(keyed), [jobs]);
  await query(url, 'analyze graphile_worker._private_jobs');
  await query(url, 'analyze graphile_worker._private_job_queues');
}

/** `parallel` × `graphile-worker --once` (perfTest/run.js); `keyed`: a queue per key. */
export async function graphileDrain(url: string, jobs: number, parallel: number, keyed = false) {
  await addJobs(url, jobs, keyed);
  const marks = markDir();
  const watch = watchSettled(url, PENDING.graphile);
  try {
    const exits = onceProcesses(url, parallel, marks.dir);
    // The same end as every system's: nothing pending (lib/settled.ts), not the processes' exit.
    const settledAt = await Promise.race([watch.settled, exits.then((r) => (assertOk('graphile-worker --once', r), watch.settled))]);
    assertOk('graphile-worker --once', await exits);
    const drainMs = settledAt - marks.earliest();
    const left = await query<{ n: number }>(url, 'select count(*)::int as n from graphile_worker._private_jobs');
    if (left.rows[0]!.n !== 0) throw new Error(`graphile-worker left ${left.rows[0]!.n} jobs behind`);
    return { perSecond: (jobs * 1000) / drainMs, drainSeconds: drainMs / 1000 };
  } finally {
    await watch.stop();
    marks.cleanup();
  }
}

/** One in-process runner (`run()`), started once the jobs are in; `keyed`: a queue per key. */
export async function graphileRunDrain(url: string, jobs: number, keyed = false) {
  await addJobs(url, jobs, keyed);
  let firstMs: number | undefined;
  const watch = watchSettled(url, PENDING.graphile);
  const runner = await startGraphileRunner(url, { onJob: () => void (firstMs ??= nowMs()) });
  try {
    const drainMs = (await watch.settled) - firstMs!;
    return { perSecond: (jobs * 1000) / drainMs, drainSeconds: drainMs / 1000 };
  } finally {
    await runner.stop();
    await watch.stop();
  }
}

/**
 * When autovacuum last analyzed graphile-worker's jobs table, in ms from `committedAt`, and how
 * many rows that analyze saw. An analyze of the emptied table (0 rows) just before a burst leaves
 * its fetch planned as a nested loop over the whole table for each job fetched: the burst crawls
 * until the next autoanalyze (docs/performance.md).
 */
export async function graphileAutoAnalyze(url: string, committedAt: number): Promise<string> {
  const { rows } = await query<{ at: number | null; count: number; reltuples: number }>(
    url,
    `select extract(epoch from s.last_autoanalyze) * 1000 as at, s.autoanalyze_count::int as count, c.reltuples
       from pg_stat_user_tables s join pg_class c on c.oid = s.relid
      where s.schemaname = 'graphile_worker' and s.relname = '_private_jobs'`,
  );
  const r = rows[0];
  if (!r || r.at === null) return 'jobs table not autoanalyzed';
  return `jobs table autoanalyzed ${r.count}× (last at ${Math.round(r.at - committedAt)} ms from COMMIT; reltuples now ${r.reltuples})`;
}

/**
 * What graphile-worker's processes did around a burst (BENCH_BURST_TRACE=1), in ms from its
 * COMMIT: when the notification arrived, the first and last fetch, how many, the longest wait
 * between two fetches of one process, and any job error or refetch delay in between.
 */
export function summarizeGraphileTrace(file: string, committedAt: number): string {
  if (!existsSync(file)) return 'no events recorded';
  const events = readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [at, pid, ...what] = line.split(' ');
      return { ms: Number(at) - committedAt, pid: pid!, what: what.join(' ') };
    })
    .filter((e) => e.ms >= -5);
  const ms = (v: number | undefined) => (v === undefined ? '—' : `${Math.round(v)}`);
  const fetches = events.filter((e) => e.what.startsWith('fetched'));
  let gap = { ms: 0, at: 0, pid: '' };
  const last = new Map<string, number>();
  for (const f of fetches) {
    const prev = last.get(f.pid);
    if (prev !== undefined && f.ms - prev > gap.ms) gap = { ms: f.ms - prev, at: prev, pid: f.pid };
    last.set(f.pid, f.ms);
  }
  const errors = events.filter((e) => e.what.startsWith('job error') || e.what.startsWith('listen error'));
  const delays = events.filter((e) => e.what.startsWith('refetch-delay'));
  return [
    `notification at ${ms(events.find((e) => e.what.startsWith('notification'))?.ms)} ms`,
    `first fetch ${ms(fetches[0]?.ms)} ms, last ${ms(fetches.at(-1)?.ms)} ms, ${fetches.length} fetches`,
    `longest wait between fetches ${Math.round(gap.ms)} ms (after ${Math.round(gap.at)} ms, pid ${gap.pid || '—'})`,
    `${delays.length} refetch delays, ${errors.length} errors${errors[0] ? ` (first: ${errors[0].what})` : ''}`,
  ].join('; ');
}

/**
 * graphile-worker as its latency test runs it: an in-process runner, concurrency 1, default
 * settings (woken by LISTEN/NOTIFY), one task `latency` that passes each job's `{ id }` to
 * `arrived`; `insert` adds a job on the caller's transaction, `keyed`: in a queue of its own key
 * (the same guarantee of order as ours). The latency section's and the held snapshot's.
 */
export async function startGraphileLatencyRunner(url: string, arrived: (id: number) => void, keyed = false) {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  const runner = await run({
    pgPool: pool,
    concurrency: 1,
    noHandleSignals: true,
    logger: silent,
    taskList: { latency: async (payload) => arrived((payload as { id: number }).id) },
  });
  const queue = graphileQueueName(keyed);
  return {
    pool,
    queue,
    insert: async (client: pg.Client, id: number) => {
      await client.query(`select graphile_worker.add_job('latency', json_build_object('id', $1::int), ${queue})`, [id]);
    },
    async stop() {
      await runner.stop();
      await pool.end();
    },
  };
}

/**
 * Latency as graphile/worker perfTest/latencyTest.js measures it: the runner above, 100 warm-up
 * jobs first; `keyed`: every job in a queue of its own key (the same guarantee of order as ours).
 */
export async function graphileLatency(url: string, samples: number, keyed = false) {
  const probe = new LatencyProbe();
  const runner = await startGraphileLatencyRunner(url, (id) => probe.arrived(id), keyed);
  const { pool, queue } = runner;
  try {
    await pool.query(`select graphile_worker.add_job('latency', json_build_object('id', -i), ${queue}) from generate_series(1, 100) i`);
    for (let i = 0; i < 500; i++) {
      const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from graphile_worker._private_jobs`);
      if (rows[0]?.n === 0) break;
      await sleep(20);
    }
    return await probe.run({ url, samples, insert: runner.insert });
  } finally {
    await runner.stop();
  }
}
