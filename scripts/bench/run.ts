import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { useFixedRequestCounts } from './api.ts';
import { createContext, runSection } from './context.ts';
import { parseFlags, usageError } from './lib/cli.ts';
import { pgbenchVersion, PGBENCH_INSTALL_HINT } from './lib/pgbench.ts';
import { machine, postgresSettings, startServer, versions, type BenchServer } from './lib/server.ts';
import { codeVersion } from './lib/trace.ts';
import { DEFAULT_OUT, FULL, SMOKE, type BenchParams } from './params.ts';
import { NATS_INSTALL_HINT, natsServerVersion } from '../lib/nats.ts';
import { renderMarkdown } from './report.ts';
import type { BenchResults } from './results.ts';
import { SECTION_NAMES, SECTIONS } from './sections/index.ts';
import { benchSetup } from './setup.ts';
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

  --smoke               every measurement once, on tiny inputs (about 2 min on two cores; npm run bench:smoke)
  --out DIR             where to write the two result files (default: var/bench)
  --only SECTION,...    only these sections: ${SECTION_NAMES.join(', ')}
  -h, --help            print this and exit

Environment:
  PGBENCH                       the pgbench binary (default /usr/bin/pgbench)
  BENCH_CODE_COMMIT             the commit measured, when the tree is not a git checkout
  BENCH_RUNS=N                  measure each figure N times instead of 5 (quicker, noisier)
  BENCH_BURST_TRACE=1           log the outbox every 500 ms during each burst
  BENCH_WORKER_STDIO=inherit    show our burst workers' own logs
`;

const t0 = Date.now();
const log = (msg: string) => process.stdout.write(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${msg}\n`);

/** The command line and BENCH_RUNS: which run, which sections, where the results go. */
function readFlags(): { P: BenchParams; smoke: boolean; only?: Set<string>; outDir: string } {
  const flags = parseFlags('bench', USAGE, { smoke: { type: 'boolean' }, out: { type: 'string' }, only: { type: 'string' } });
  const only = flags.only === undefined ? undefined : new Set(flags.only.split(',').map((s) => s.trim()));
  for (const name of only ?? []) {
    if (!SECTION_NAMES.includes(name)) usageError('bench', USAGE, `--only: unknown section "${name}"`);
  }
  const P: BenchParams = { ...(flags.smoke ? SMOKE : FULL), ...(process.env.BENCH_RUNS ? { runs: Number(process.env.BENCH_RUNS) } : {}) };
  if (!(Number.isInteger(P.runs) && P.runs > 0))
    usageError('bench', USAGE, `BENCH_RUNS: expected a positive whole number, got "${process.env.BENCH_RUNS}"`);
  return { P, smoke: !!flags.smoke, only, outDir: path.resolve(flags.out ?? DEFAULT_OUT) };
}

/** Ctrl-C: the server runs in its own process group, so it must be stopped here or be orphaned. */
function stopOnSignal(server: BenchServer): void {
  const onSignal = () => {
    log('interrupted: stopping postgres');
    void server.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
}

/** The targets, then bench-results.json and bench-results.md; the exit code: 1 if a section failed. */
function writeResults(results: BenchResults, outDir: string): number {
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

async function main(): Promise<number> {
  const { P, smoke, only, outDir } = readFlags();
  useFixedRequestCounts(P.httpRequestsPerConnection);
  log(`StayHub bench (${smoke ? 'smoke' : 'full'}), results to ${outDir}`);
  const pgbench = await pgbenchVersion();
  if (!pgbench) log(PGBENCH_INSTALL_HINT);
  const natsServer = natsServerVersion();
  if (!natsServer && (!only || only.has('relay'))) log(`${NATS_INSTALL_HINT}. The relay figures are skipped.`);

  const server = await startServer(log);
  stopOnSignal(server);
  const results: BenchResults = {
    mode: smoke ? 'smoke' : 'full',
    startedAt: new Date(t0).toISOString(),
    code: codeVersion(),
    load: {},
    seconds: {},
    machine: machine(),
    versions: versions('', pgbench, natsServer),
    postgresSettings: {},
    params: P,
    setup: benchSetup(P),
    errors: [],
  };
  const ctx = createContext({ P, smoke, server, log, results, pgbench, natsServer });
  try {
    results.postgresSettings = await postgresSettings(server.url('postgres'));
    results.versions = versions(results.postgresSettings.server_version ?? 'unknown', pgbench, natsServer);
    for (const section of SECTIONS) await runSection(ctx, section, only);
  } finally {
    const t = Date.now();
    await server.stop();
    log(`postgres stopped in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  }
  return writeResults(results, outDir);
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
