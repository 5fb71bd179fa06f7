import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTcpProxy } from '../../../scripts/lib/tcp-proxy.ts';
import { probeTransactionPooler } from '../../../src/db/pooler-probe.ts';
import { CLAIM_STATEMENT } from '../../../src/outbox/testing.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { ROOT } from '../../helpers/npm-run.ts';
import { skipWithout } from '../../helpers/tools.ts';
import { PGBOUNCER_INSTALL, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * A process whose DATABASE_POOLER does not match what is in front of its DATABASE_URL, through a
 * real PgBouncer (test/helpers/pgbouncer.ts). Told `none`, a worker behind a transaction-mode pool
 * used to run, failing its named statements, and left its claim connection's session settings
 * (synchronous_commit = off, enable_seqscan = off…) on server connections the API then got; an API
 * told `none` there answered most bookings with 500 while it reported healthy. Both now refuse to
 * start. And a worker with the right setting leaves nothing behind on the pool's connections, even
 * a pool that does not reset them itself.
 */

const skip = skipWithout('pgbouncer', ['--version'], PGBOUNCER_INSTALL);
const bouncers: PgBouncer[] = [];
let tdb: TestDatabase;

beforeAll(async () => {
  if (skip) return;
  tdb = await createTestDatabase('mismatch');
  // The suite's server commits asynchronously for speed (global-setup); this database does not, so
  // that a connection left with synchronous_commit = off shows.
  await tdb.pool.query(`alter database ${pg.escapeIdentifier(new URL(tdb.url).pathname.slice(1))} set synchronous_commit = on`);
});
afterAll(async () => {
  for (const b of bouncers) await b.stop();
  await tdb?.drop();
});

/** PgBouncer with `settings` in front of the test's server; the test database's URL through it. */
async function bouncer(settings: Record<string, string | number>): Promise<string> {
  const b = await startPgBouncer(tdb.url, { max_client_conn: 100, ...settings });
  bouncers.push(b);
  return b.url(tdb.url);
}

/** The settings a worker's claim connection changes, and its named claim, as `n` clients at once find them (so `n` server connections, every one of a pool of `n`). */
async function settingsOfServerConnections(
  url: string,
  n: number,
): Promise<{ pid: number; sync: string; seqscan: string; prepared: number }[]> {
  const clients = Array.from({ length: n }, () => new pg.Client({ connectionString: url }));
  try {
    await Promise.all(clients.map((c) => c.connect()));
    await Promise.all(clients.map((c) => c.query('begin')));
    const rows = await Promise.all(
      clients.map(
        async (c) =>
          (
            await c.query<{ pid: number; sync: string; seqscan: string; prepared: number }>(
              `select pg_backend_pid() as pid, current_setting('synchronous_commit') as sync,
                      current_setting('enable_seqscan') as seqscan, (select count(*)::int from pg_prepared_statements where name = $1) as prepared`,
              [CLAIM_STATEMENT],
            )
          ).rows[0]!,
      ),
    );
    await Promise.all(clients.map((c) => c.query('commit')));
    return rows;
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
  }
}

/** The server's own values of those settings (the test server runs with synchronous_commit off: global-setup). */
async function serverDefaults(): Promise<{ sync: string; seqscan: string; prepared: number }> {
  const c = new pg.Client({ connectionString: tdb.url });
  await c.connect();
  try {
    const { rows } = await c.query<{ sync: string; seqscan: string }>(
      `select current_setting('synchronous_commit') as sync, current_setting('enable_seqscan') as seqscan`,
    );
    return { ...rows[0]!, prepared: 0 };
  } finally {
    await c.end();
  }
}

/** The worker's environment: the database through `url`, nothing else it needs from outside. */
const workerEnv = (url: string, pooler: string) => ({
  DATABASE_URL: url,
  DATABASE_POOLER: pooler,
  WORKER_CONCURRENCY: '2',
  MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
});

describe.skipIf(skip)('what stands in front of DATABASE_URL', () => {
  it('the probe sees a transaction-mode pool (default and round robin) or a statement-mode one, and neither PostgreSQL, a session pool nor a TCP proxy', async () => {
    const proxy = await startTcpProxy(tdb.url);
    try {
      const seen = {
        direct: (await probeTransactionPooler(tdb.url)).transactionPooled,
        proxy: (await probeTransactionPooler(proxy.url)).transactionPooled,
        session: (await probeTransactionPooler(await bouncer({ pool_mode: 'session' }))).transactionPooled,
        transaction: (await probeTransactionPooler(await bouncer({ pool_mode: 'transaction' }))).transactionPooled,
        roundRobin: (
          await probeTransactionPooler(
            await bouncer({ pool_mode: 'transaction', server_round_robin: 1, default_pool_size: 3, min_pool_size: 3 }),
          )
        ).transactionPooled,
        ofOne: (await probeTransactionPooler(await bouncer({ pool_mode: 'transaction', default_pool_size: 1 }))).transactionPooled,
        statement: (await probeTransactionPooler(await bouncer({ pool_mode: 'statement' }))).transactionPooled,
      };
      expect(seen).toEqual({
        direct: false,
        proxy: false,
        session: false,
        transaction: true,
        roundRobin: true,
        ofOne: true,
        statement: true,
      });
    } finally {
      await proxy.close();
    }
  });

  it('a worker told DATABASE_POOLER=none behind a transaction-mode pool refuses to start, in one line, and leaves no setting on the pool', async () => {
    const url = await bouncer({ pool_mode: 'transaction', default_pool_size: 4 });
    const err: string[] = [];
    const code = await drainOutbox({
      argv: ['--once'],
      env: workerEnv(url, 'none'),
      out: () => {},
      err: (l) => err.push(l),
      exitOnForcedStop: false,
    });
    expect({ code, err }).toEqual({
      code: 2,
      err: [
        expect.stringMatching(
          /^drain-outbox: invalid configuration: DATABASE_POOLER=none, but DATABASE_URL leads to a transaction-mode pooler .*Connect the worker to PostgreSQL directly/,
        ),
      ],
    });
    const defaults = await serverDefaults();
    for (const c of await settingsOfServerConnections(url, 4)) expect(c).toMatchObject(defaults);
  });

  it('an API told DATABASE_POOLER=none behind a transaction-mode pool refuses to start, in one line', async () => {
    const url = await bouncer({ pool_mode: 'transaction', default_pool_size: 4 });
    const child = spawn(process.execPath, entryArgs('src/commands/api.ts'), {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        DATABASE_URL: url,
        DATABASE_POOLER: 'none',
        HOST: '127.0.0.1',
        PORT: String(await freePort()),
        LOG_FORMAT: 'json',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    // Exited, or (what it did before) listening and answering bookings it cannot make.
    const outcome = await new Promise<number | 'listening'>((resolve) => {
      child.once('exit', (code) => resolve(code ?? -1));
      const seeListening = setInterval(() => {
        if (stdout.includes('listening')) {
          clearInterval(seeListening);
          resolve('listening');
        }
      }, 100);
      child.once('exit', () => clearInterval(seeListening));
    });
    if (outcome === 'listening') {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    expect({ outcome, stderr }).toEqual({
      outcome: 2,
      stderr: expect.stringMatching(
        /^api: invalid configuration: DATABASE_POOLER=none, but DATABASE_URL leads to a transaction-mode pooler .*Set DATABASE_POOLER=transaction[^\n]*\n$/,
      ),
    });
  }, 120_000);

  it('a worker with the right setting, through a session pool that resets nothing, leaves the pool its defaults when it stops', async () => {
    // A pool that lends a server connection on as the last client left it (server_reset_query
    // empty, as some deployments run it for speed): what the worker set is what the next gets.
    const url = await bouncer({ pool_mode: 'session', default_pool_size: 8, server_reset_query: '' });
    const err: string[] = [];
    const code = await drainOutbox({
      argv: ['--until-empty'],
      env: workerEnv(url, 'session'),
      out: () => {},
      err: (l) => err.push(l),
      exitOnForcedStop: false,
    });
    expect({ code, err }).toEqual({ code: 0, err: [] });
    const after = await settingsOfServerConnections(url, 8);
    const defaults = await serverDefaults();
    expect(after.map(({ sync, seqscan, prepared }) => ({ sync, seqscan, prepared }))).toEqual(after.map(() => defaults));
  });
});
