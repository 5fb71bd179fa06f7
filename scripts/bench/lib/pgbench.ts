import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runProcess } from '../../lib/processes.ts';
import { percentile, round } from './stats.ts';

export const PGBENCH = process.env.PGBENCH ?? '/usr/bin/pgbench';

/** pgbench's version line, or null (with the install hint printed) when it is not installed. */
export async function pgbenchVersion(): Promise<string | null> {
  try {
    const r = await runProcess(PGBENCH, ['--version']);
    if (r.code === 0) return r.stdout.trim();
  } catch {
    /* not installed */
  }
  return null;
}

export const PGBENCH_INSTALL_HINT =
  'pgbench was not found (set PGBENCH=/path/to/pgbench, or on Debian/Ubuntu: apt-get install -y postgresql-client). ' +
  'The pgbench figures are skipped.';

export interface PgbenchRun {
  tps: number;
  p99: number;
  transactions: number;
  failed: number;
}

/**
 * Runs a custom pgbench script. Per-transaction latencies are logged (-l) to compute p99 like
 * autocannon's.
 *
 * The protocol (`mode`): `extended` (parse, bind and execute every time, unnamed statements) is
 * what node-postgres sends for a parameterised query. The API's hot statements are named ones
 * (src/db/prepared.ts), parsed once per connection, which is `-M prepared`: the stricter peer for
 * the booking path, reported next to the target's.
 */
export type PgbenchMode = 'extended' | 'prepared';

export async function runPgbench(opts: {
  url: string;
  script: string;
  clients: number;
  seconds: number;
  /**
   * A fixed number of transactions per client (`-t`) instead of a duration: the smoke run uses it,
   * so pgbench finishes with transactions however loaded the machine is (with `-T 2`, 32 clients
   * still connecting on a busy machine completed none).
   */
  transactionsPerClient?: number;
  vars: Record<string, number>;
  mode?: PgbenchMode;
}): Promise<PgbenchRun> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-pgbench-'));
  try {
    const scriptFile = path.join(dir, 'txn.sql');
    writeFileSync(scriptFile, opts.script);
    const u = new URL(opts.url);
    const args = [
      '-h',
      u.hostname,
      '-p',
      u.port,
      '-U',
      decodeURIComponent(u.username),
      '-n', // no vacuum of pgbench's own tables (we have none)
      '-M',
      opts.mode ?? 'extended',
      '-c',
      String(opts.clients),
      '-j',
      String(Math.min(opts.clients, 2)),
      ...(opts.transactionsPerClient ? ['-t', String(opts.transactionsPerClient)] : ['-T', String(opts.seconds)]),
      '-f',
      scriptFile,
      '-l',
      `--log-prefix=${path.join(dir, 'log')}`,
      '-D',
      `clients=${opts.clients}`,
      ...Object.entries(opts.vars).flatMap(([k, v]) => ['-D', `${k}=${v}`]),
      u.pathname.slice(1),
    ];
    const r = await runProcess(PGBENCH, args, { env: { PGPASSWORD: decodeURIComponent(u.password) } });
    if (r.code !== 0) throw new Error(`pgbench failed (${r.code}): ${r.stderr.slice(-2000)}\n${r.stdout.slice(-2000)}`);
    const tps = Number(/tps = ([\d.]+)/.exec(r.stdout)?.[1]);
    const transactions = Number(/number of transactions actually processed: (\d+)/.exec(r.stdout)?.[1]);
    const failed = Number(/number of failed transactions: (\d+)/.exec(r.stdout)?.[1] ?? 0);
    const latencies: number[] = [];
    for (const f of readdirSync(dir).filter((f) => f.startsWith('log'))) {
      for (const line of readFileSync(path.join(dir, f), 'utf8').split('\n')) {
        const cols = line.split(' ');
        if (cols.length >= 3) latencies.push(Number(cols[2]) / 1000); // µs → ms
      }
    }
    if (!Number.isFinite(tps)) {
      if (transactions === 0) throw new Error(`pgbench completed no transaction in ${opts.seconds} s (clients still connecting?)`);
      throw new Error(`could not read tps from pgbench output:\n${r.stdout}`);
    }
    return { tps: round(tps, 1), p99: round(percentile(latencies, 99), 3), transactions, failed };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
