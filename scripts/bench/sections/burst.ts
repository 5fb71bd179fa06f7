import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { nowMs } from '../lib/marks.ts';
import { withClient } from '../../lib/postgres.ts';
import { entryArgs, ROOT, stopChild } from '../../lib/processes.ts';
import { fillBacklog, outboxExists, statusCounts, wakeUp } from '../lib/outbox.ts';
import { PENDING, watchSettled } from '../lib/settled.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PgBossConfig } from '../params.ts';
import {
  addJobsSql,
  GRAPHILE_CLI,
  GRAPHILE_CONFIG,
  graphileConfig,
  graphileAutoAnalyze,
  startGraphileRunner,
  summarizeGraphileTrace,
} from '../peers/graphile.ts';
import { jobOf, PGBOSS_POLL_SECONDS, queueOptions, startBoss, workAll } from '../peers/pgboss.ts';
import { comparedTables, n, targetLines } from '../lib/markdown.ts';
import { compareConfigs, measureEach, type Config } from '../lib/stats.ts';
import { OURS_THROUGHPUT, pgBossConfig, type BenchContext, type PartOf } from '../context.ts';

/** Idle long-running workers of each system hit by one burst committed in one statement. */
export const burstSection = {
  name: 'burst',
  markdown: [{ place: 1.5, render: burstMarkdown }],
  async run({ P, log, freshOurs, freshGraphile, freshPgBoss }: BenchContext) {
    const n = P.burstMessages;
    /** Every configuration after a warm-up, or (the keys and labels say "cold") without one. */
    const configs = (warm: boolean): Config<string, Burst>[] => {
      const spell: IdleSpell = { warm, idleMs: P.burstIdleMs };
      const cold = (c: { key: string; system?: string; label: string }) =>
        warm ? c : { ...c, key: `${c.key}Cold`, label: `${c.label}, cold` };
      const graphile = [false, true].flatMap((keyed) => {
        const { key, system, label } = graphileConfig(keyed);
        return [
          ...P.burstGraphileProcesses.map((processes) => ({
            ...cold({ key: key(`graphileCli${processes}`), system, label: label(`graphile-worker CLI ×${processes}`) }),
            measure: async () => graphileBurst(await freshGraphile(), n, spell, { processes, keyed }),
          })),
          {
            ...cold({ key: key('graphileRun'), system, label: label('graphile-worker run() in-process') }),
            measure: async () => graphileBurst(await freshGraphile(), n, spell, { keyed }),
          },
        ];
      });
      return [
        ...[1, 2].map((processes) => ({
          ...cold({ key: `ours${processes}`, label: `ours ×${processes}` }),
          measure: async () => oursBurst(await freshOurs(), n, processes, OURS_THROUGHPUT, spell),
        })),
        ...graphile,
        ...P.pgBossConfigs.map((cfg) => ({
          ...cold(pgBossConfig(cfg)),
          measure: async () => pgBossBurst(await freshPgBoss(), n, cfg, spell),
        })),
      ];
    };
    const measured = await measureEach(P.runs, P.burstWarmUps.flatMap(configs), {
      log,
      show: (b) => `${Math.round(b.perSecond)} msg/s (${b.seconds.toFixed(2)} s from COMMIT)`,
    });
    const oursKeys = Object.keys(measured).filter((k) => measured[k]!.system === 'ours');
    return { burst: { messages: n, ...compareConfigs(measured, (b) => b.perSecond, oursKeys, oursKeys) } };
  },
};

function burstMarkdown(r: PartOf<typeof burstSection>): string[] {
  if (!r.burst) return [];
  const b = r.burst;
  const L: string[] = [];
  L.push(
    `## 1b. Idle workers hit by a burst (${n(b.messages)} no-op messages committed in one statement; clock from COMMIT to nothing pending)`,
    '',
  );
  const idle = r.params.burstIdleMs / 1000;
  comparedTables(
    L,
    b,
    { rate: 'perSecond', time: 'seconds', timeHead: 'Seconds from COMMIT' },
    `Each configuration after a warm-up batch (100 handled, then ${idle} s idle) and "cold" (started, ${idle} s idle, no warm-up).`,
  );
  targetLines(L, r.targets, 'Burst');
  return L;
}

/**
 * Long-running idle workers hit by a burst: the state an outbox worker spends its life in.
 * Every system is started in its long-running mode and left idle (connected, listening or
 * polling), then `count` no-op messages are committed in ONE statement, and the clock runs from
 * that COMMIT to the moment nothing is pending (lib/settled.ts, the same observer for every
 * system). Each run gets a fresh database. Every configuration is measured two ways (IdleSpell):
 * after a warm-up batch (100 messages handled to the end, then idle: connections open, code
 * compiled, plans cached) and without one (started, then idle); the report compares each peer's
 * stronger configuration. Idle for 1 s (BenchParams.burstIdleMs).
 *
 *   ours                      scripts/bench/bench-worker.ts (src/commands/drain-outbox.ts) with no
 *                             mode flag, 1 or 2 processes, LISTEN/NOTIFY; the wake-up sent after
 *                             COMMIT as enqueue does
 *   graphile-worker CLI       `graphile-worker --config` without --once, 1 or 2 processes, perfTest settings
 *   graphile-worker run()     in-process `run({ preset, taskList })` in this process, the same preset
 *   pg-boss                   work() in this process, PgBossConfig (batch, local loops), woken by LISTEN/NOTIFY, polling every 0.5 s behind it
 *
 * Each peer also in its same-guarantee configuration (a queue per key, key_strict_fifo: peers/).
 */

type Burst = { perSecond: number; seconds: number };

/** The spell before a burst: a warm-up batch first or not, then `idleMs` idle. */
interface IdleSpell {
  warm: boolean;
  idleMs: number;
}

/** Waits until `n` connections to this database sit on LISTEN (the worker is up and idle). */
async function waitListening(url: string, n: number, procs: ChildProcess[], timeoutMs = 60_000): Promise<void> {
  await withClient(url, async (c) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const p of procs) if (p.exitCode !== null) throw new Error(`a worker exited (${p.exitCode}) before it was idle`);
      const { rows } = await c.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and query ilike 'listen%'`,
      );
      if (rows[0]!.n >= n) return;
      if (Date.now() > deadline) throw new Error(`${rows[0]!.n} of ${n} workers listening after ${timeoutMs} ms`);
      await sleep(50);
    }
  });
}

/** Commits `insertSql` (one statement) and times from COMMIT until nothing is pending. */
async function timeBurst(
  url: string,
  count: number,
  pending: BurstWork['pending'],
  insert: (c: pg.Client) => Promise<void>,
  afterCommit?: BurstWork['afterCommit'],
): Promise<Burst & { committedAt: number }> {
  const c = new pg.Client({ connectionString: url, application_name: 'bench-burst-producer' });
  await c.connect();
  let committed!: (t: number) => void;
  const commitAt = new Promise<number>((r) => (committed = r));
  const watch = watchSettled(url, pending.sql, pending.values ?? [], { after: commitAt });
  try {
    await c.query('begin');
    await insert(c);
    const t0 = nowMs();
    await c.query('commit');
    await afterCommit?.(c);
    committed(t0);
    const trace = process.env.BENCH_BURST_TRACE === '1' ? traceBurst(url, t0) : undefined;
    const seconds = ((await watch.settled) - t0) / 1000;
    await trace?.stop();
    return { perSecond: count / seconds, seconds, committedAt: t0 };
  } finally {
    committed(0);
    await watch.stop();
    await c.end();
  }
}

/**
 * BENCH_BURST_TRACE=1: every 500 ms, what the outbox and the other connections to this database
 * are doing (to look into a slow burst).
 */
function traceBurst(url: string, t0: number) {
  const c = new pg.Client({ connectionString: url, application_name: 'bench-burst-trace' });
  let on = true;
  const done = (async () => {
    await c.connect();
    // Our outbox only: a peer's database has no such table.
    const ours = await outboxExists(c);
    while (on && ours) {
      const o = await statusCounts(c);
      const { rows: a } = await c.query(
        `select application_name app, state, wait_event_type || ':' || wait_event wait, round(extract(epoch from now() - query_start)::numeric, 2) secs, left(regexp_replace(query, '\\s+', ' ', 'g'), 50) q
           from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and state <> 'idle'`,
      );
      process.stdout.write(`trace +${((nowMs() - t0) / 1000).toFixed(1)}s outbox ${JSON.stringify(o)} active ${JSON.stringify(a)}\n`);
      await sleep(500);
    }
    await c.end();
  })();
  return {
    stop: async () => {
      on = false;
      await done.catch(() => {});
    },
  };
}

/** What a burst writes and when it is over: a system's jobs, and its own "nothing pending". */
interface BurstWork {
  pending: { sql: string; values?: unknown[] };
  /** `n` jobs in one statement, on the producer's open transaction. */
  insert: (n: number) => (c: pg.Client) => Promise<void>;
  afterCommit?: (c: pg.Client) => Promise<void>;
}

/**
 * The idle spell (with `warm`, a warm-up batch of 100 handled to the end first: connections open,
 * code paths compiled; then idle either way), then the burst of `count`, timed.
 */
async function burstAfter(spell: IdleSpell, url: string, count: number, w: BurstWork) {
  if (spell.warm) await timeBurst(url, 1, w.pending, w.insert(100));
  await sleep(spell.idleMs);
  return timeBurst(url, count, w.pending, w.insert(count), w.afterCommit);
}

/** Our no-op messages, the wake-up sent after COMMIT as enqueue does. */
const OURS: BurstWork = {
  pending: { sql: PENDING.ours },
  insert: (n) => (c) => fillBacklog(c, 'bench.noop', n),
  afterCommit: (c) => wakeUp(c, 'bench.noop'),
};

async function oursBurst(url: string, count: number, processes: number, env: Record<string, string>, spell: IdleSpell): Promise<Burst> {
  const procs = Array.from({ length: processes }, () =>
    spawn(process.execPath, entryArgs('scripts/bench/bench-worker.ts'), {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: url, LOG_LEVEL: 'warn', MAIL_DIR: path.join(os.tmpdir(), 'stayhub-bench-mail'), ...env },
      // BENCH_WORKER_STDIO=inherit shows the workers' own logs (to look into a slow run).
      stdio: process.env.BENCH_WORKER_STDIO === 'inherit' ? 'inherit' : 'ignore',
    }),
  );
  try {
    await waitListening(url, processes, procs);
    const { perSecond, seconds } = await burstAfter(spell, url, count, OURS);
    return { perSecond, seconds };
  } finally {
    await Promise.all(procs.map((p) => stopChild(p)));
  }
}

/**
 * graphile-worker, `processes` long-running CLI processes with the perfTest settings, or (no
 * `processes`) in-process `run({ preset, taskList })` in this process with the same preset;
 * `keyed`: a queue per key.
 */
async function graphileBurst(url: string, count: number, spell: IdleSpell, opts: { processes?: number; keyed: boolean }): Promise<Burst> {
  const trace = process.env.BENCH_BURST_TRACE === '1' ? traceFile() : undefined;
  const procs = Array.from({ length: opts.processes ?? 0 }, () =>
    spawn(process.execPath, [GRAPHILE_CLI, '--config', GRAPHILE_CONFIG, '-c', url], {
      cwd: ROOT,
      env: { ...process.env, NO_LOG_SUCCESS: '1', ...(trace ? { BENCH_GRAPHILE_TRACE: trace.file } : {}) },
      stdio: 'ignore',
    }),
  );
  const runner = opts.processes ? undefined : await startGraphileRunner(url, { trace: trace?.file });
  try {
    await waitListening(url, opts.processes ?? 1, procs);
    const insert = (n: number) => async (c: pg.Client) => void (await c.query(addJobsSql(opts.keyed), [n]));
    const b = await burstAfter(spell, url, count, { pending: { sql: PENDING.graphile }, insert });
    if (trace) {
      const summary = [summarizeGraphileTrace(trace.file, b.committedAt), await graphileAutoAnalyze(url, b.committedAt)].join('; ');
      process.stdout.write(`graphile-worker trace: ${summary}\n`);
    }
    return { perSecond: b.perSecond, seconds: b.seconds };
  } finally {
    await Promise.all(procs.map((p) => stopChild(p)));
    await runner?.stop();
    trace?.cleanup();
  }
}

function traceFile() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-bench-graphile-trace-'));
  return { file: path.join(dir, 'events.log'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** pg-boss in this process: one work() of `cfg.workers` loops fetching `cfg.batchSize` jobs, woken by NOTIFY, polling every 0.5 s behind it. */
async function pgBossBurst(url: string, count: number, cfg: PgBossConfig, spell: IdleSpell): Promise<Burst> {
  const boss = await startBoss(url);
  const name = `burst_${Date.now()}`;
  await boss.createQueue(name, queueOptions(cfg));
  try {
    await workAll(boss, name, cfg, PGBOSS_POLL_SECONDS, async () => {});
    const { perSecond, seconds } = await burstAfter(spell, url, count, {
      pending: { sql: PENDING.pgBoss, values: [name] },
      // pg-boss's own insert(), run on the burst's transaction through its `db` option: one statement.
      insert: (n) => async (c) => {
        const jobs = Array.from({ length: n }, (_, i) => jobOf(cfg, { i }));
        await boss.insert(name, jobs, { db: { executeSql: (text: string, values?: unknown[]) => c.query(text, values) } });
      },
    });
    return { perSecond, seconds };
  } finally {
    await boss.stop({ graceful: false });
  }
}
