import { loadBefore } from './lib/trace.ts';
import type { BenchServer } from './lib/server.ts';
import { historyClones, type HistoryClones } from './lib/history-clones.ts';
import type { BenchParams, PgBossConfig } from './params.ts';
import { PEERS } from './peers/guarantees.ts';
import { setupGraphile } from './peers/graphile.ts';
import { pgBossLabel, setupPgBoss } from './peers/pgboss.ts';

/*
 * What every section of the bench is given (BenchContext) and what it is (BenchSection): a name
 * `--only` selects, `run(ctx)`, which measures and returns its part of the results, and
 * `markdown`, its parts of bench-results.md. sections/index.ts lists the sections.
 */

export interface BenchContext {
  P: BenchParams;
  smoke: boolean;
  server: BenchServer;
  log: (msg: string) => void;
  /**
   * The run's conditions, and what the sections before have measured (the webhooks compare with
   * the drain): typed without the sections' parts, which results.ts reads from every section.
   */
  results: RunConditions;
  /** The tools found, or null: a section that needs a missing one measures without it. */
  pgbench: string | null;
  natsServer: string | null;
  /** A fresh database for one run of one system, cloned from a template with its schema. */
  freshOurs: () => Promise<string>;
  freshGraphile: () => Promise<string>;
  freshPgBoss: () => Promise<string>;
  /** Our outbox holding a DONE history of a given size (purge, growth). */
  history: HistoryClones;
}

export interface BenchSection {
  /** What `--only` selects it by and the load line calls it. */
  name: string;
  /** Its part of the results (results.ts reads their shape from here). */
  run(ctx: BenchContext): Promise<object>;
  /** Its parts of bench-results.md: one a measurement, so the api section has three. */
  markdown: ReportPart[];
}

/**
 * One part of bench-results.md and its place there. The report is ordered as the docs cite it
 * (docs/performance.md's table), not as the sections run, so each part carries its number: 1b is
 * 1.5; the unnumbered parts stand where the docs put them, tracing and the noisy neighbour after
 * the webhooks (9.1, 9.2), the overload last (13, as the table numbers it).
 */
export interface ReportPart {
  place: number;
  /** A method, so each part may take its section's view of the results (PartOf). */
  render(r: RunConditions): string[];
}

/** What every part of the report may read besides its own section's figures. */
export interface RunConditions {
  params: BenchParams;
  /** The 1-minute load average before each section; `overloaded` when it exceeded the cores. */
  load: Record<string, ReturnType<typeof loadBefore>>;
  /** Each section's wall-clock time, failures included: where a run's minutes go (the smoke's too). */
  seconds: Record<string, number>;
  setup: Record<string, string>;
  targets?: TargetResult[];
  errors: { section: string; message: string }[];
}

/**
 * A section's view of the results: the run's conditions and its own figures, absent when it did
 * not run or failed. Read from what its `run` returns, as results.ts reads every section's.
 */
export type PartOf<S extends { run(ctx: BenchContext): Promise<object> }> = RunConditions & Partial<Awaited<ReturnType<S['run']>>>;

/**
 * A performance target (what "good" means; the run reports where we stand and never fails on
 * them). `met` is null when the figure could not be measured in this run.
 */
export interface TargetResult {
  name: string;
  target: string;
  value: string;
  met: boolean | null;
}

/** A drain: messages a second, and seconds from the clock's start to nothing pending. */
export type Drain = { perSecond: number; drainSeconds: number };

/** Where the API is also compared with pgbench -M prepared: the target's connection count. */
export const PREPARED_CONNECTIONS = 8;

/**
 * Our worker set up for throughput, as the peers are set up by their authors' recommendations: a
 * larger first claim (a backlog grows every claim up to WORKER_MAX_BATCH_SIZE, written out here as
 * its default) and more handlers in flight. The defaults (20 growing to 1,000, concurrency 8) suit
 * email handlers talking to one SMTP server; a no-op drain measures the queue itself.
 */
export const OURS_THROUGHPUT = { WORKER_BATCH_SIZE: '500', WORKER_MAX_BATCH_SIZE: '1000', WORKER_CONCURRENCY: '32' };

/**
 * A pg-boss configuration's key in the results (pgBoss5000x1, pgBoss5000x1Keyed), the system it
 * counts as (its fastest, or its same-guarantee one: peers/guarantees.ts) and its label.
 */
export const pgBossConfig = (c: PgBossConfig) => ({
  key: `pgBoss${c.batchSize}x${c.workers}${c.keyed ? 'Keyed' : ''}`,
  system: c.keyed ? PEERS.pgBoss.same : PEERS.pgBoss.fastest,
  label: `pg-boss ${pgBossLabel(c)}`,
});

export function createContext(
  base: Pick<BenchContext, 'P' | 'smoke' | 'server' | 'log' | 'results' | 'pgbench' | 'natsServer'>,
): BenchContext {
  const { server } = base;
  let dbSeq = 0;
  const seq = () => dbSeq++;
  // Templates with each peer's schema installed once: every run clones a fresh database, as ours does.
  let peerTemplates: Promise<{ graphile: string; pgBoss: string }> | undefined;
  const templates = () =>
    (peerTemplates ??= (async () => {
      await setupGraphile(await server.createDatabase('graphile_template'));
      await setupPgBoss(await server.createDatabase('pgboss_template'));
      return { graphile: 'graphile_template', pgBoss: 'pgboss_template' };
    })());
  return {
    ...base,
    freshOurs: () => server.createDatabase(`ours_${seq()}`, server.ourTemplate),
    freshGraphile: async () => server.createDatabase(`graphile_${seq()}`, (await templates()).graphile),
    freshPgBoss: async () => server.createDatabase(`pgboss_${seq()}`, (await templates()).pgBoss),
    history: historyClones(server, seq, base.log),
  };
}

/**
 * Runs one section, unless `--only` leaves it out: logs the load average before it and the time it
 * took (and keeps both in the results), keeps what it returns, and records its failure without
 * stopping the run.
 */
export async function runSection(ctx: BenchContext, section: BenchSection, only: Set<string> | undefined): Promise<void> {
  const { name } = section;
  if (only && !only.has(name)) return;
  const { results, log } = ctx;
  const t = Date.now();
  const load = loadBefore();
  results.load[name] = load;
  log(
    `== ${name} (load average ${load.loadAverage1m} on ${load.cores} cores${load.overloaded ? ': OVERLOADED, figures of this section are suspect' : ''})`,
  );
  try {
    Object.assign(results, await section.run(ctx));
  } catch (err) {
    const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
    results.errors.push({ section: name, message });
    log(`!! ${name} failed: ${message}`);
  }
  results.seconds[name] = Math.round((Date.now() - t) / 100) / 10;
  log(`   ${name}: ${results.seconds[name]} s`);
}
