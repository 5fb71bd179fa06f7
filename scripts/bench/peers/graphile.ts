import path from 'node:path';
import pg from 'pg';
import { Logger, run, runMigrations } from 'graphile-worker';
import { LatencyProbe } from '../lib/latency.ts';
import { assertOk, ROOT, runParallel, runProcess } from '../lib/proc.ts';
import { markDir } from '../lib/marks.ts';
import { PENDING, watchSettled } from '../lib/settled.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * graphile-worker, measured the way its authors measure it (graphile/worker perfTest/run.js):
 * jobs are added before the clock starts, then PARALLELISM `graphile-worker --once` processes
 * drain them. perfTest subtracts a separately timed start-up; we start the clock at the first job
 * any process handles instead (lib/marks.ts) and stop it when no job is left (lib/settled.ts),
 * the same rules as for every system. Settings:
 * peers/graphile.config.cjs (perfTest's graphile.config.js).
 */

const CLI = path.join(ROOT, 'node_modules/graphile-worker/dist/cli.js');
const CONFIG = path.join(ROOT, 'scripts/bench/peers/graphile.config.cjs');
const silent = new Logger(() => () => {});

export async function setupGraphile(url: string): Promise<void> {
  await runMigrations({ connectionString: url, logger: silent });
}

async function query<T extends pg.QueryResultRow = any>(url: string, text: string, values: unknown[] = []) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await c.query<T>(text, values);
  } finally {
    await c.end();
  }
}

const onceProcesses = (url: string, parallel: number, markDirPath: string) =>
  runParallel(parallel, () =>
    runProcess(process.execPath, [CLI, '--once', '--config', CONFIG, '-c', url], {
      env: { NO_LOG_SUCCESS: '1', BENCH_MARK_DIR: markDirPath },
      timeoutMs: 600_000,
    }),
  );

export async function graphileDrain(url: string, jobs: number, parallel: number) {
  // add_jobs: graphile-worker's bulk insert (one call; add_job per row takes a minute for 20,000).
  await query(
    url,
    `select graphile_worker.add_jobs(array(
       select row('noop', json_build_object('i', i), null, null, null, null, null, null)::graphile_worker.job_spec
         from generate_series(1, $1::int) i))`,
    [jobs],
  );
  await query(url, 'analyze graphile_worker._private_jobs');
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

/**
 * Latency as graphile/worker perfTest/latencyTest.js measures it: an in-process runner,
 * concurrency 1, default settings (woken by LISTEN/NOTIFY), 100 warm-up jobs first.
 */
export async function graphileLatency(url: string, samples: number) {
  const probe = new LatencyProbe();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  const runner = await run({
    pgPool: pool,
    concurrency: 1,
    noHandleSignals: true,
    logger: silent,
    taskList: { latency: async (payload) => probe.arrived((payload as { id: number }).id) },
  });
  try {
    await pool.query(`select graphile_worker.add_job('latency', json_build_object('id', -i)) from generate_series(1, 100) i`);
    for (let i = 0; i < 500; i++) {
      const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from graphile_worker._private_jobs`);
      if (rows[0]?.n === 0) break;
      await sleep(20);
    }
    return await probe.run({
      url,
      samples,
      insert: async (client, id) => {
        await client.query(`select graphile_worker.add_job('latency', json_build_object('id', $1::int))`, [id]);
      },
    });
  } finally {
    await runner.stop();
    await pool.end();
  }
}
