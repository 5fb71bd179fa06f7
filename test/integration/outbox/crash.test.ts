import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import { EmbeddedPostgres } from '../../../src/db/embedded.ts';
import { runMigrations } from '../../../src/db/migrate.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The worker commits its own writes (claim, lease, DONE, retry, hand-back) asynchronously
 * (src/outbox/sql.ts): a database crash may lose the last of them. This crashes a
 * PostgreSQL of its own (immediate shutdown: no checkpoint, WAL not yet flushed is gone, crash
 * recovery at the next start) in the middle of a drain, and checks that nothing is lost: every
 * message ends DONE and every one was handled at least once.
 */

let dir: string;
let server: EmbeddedPostgres;
let url: string;
beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-crash-'));
  chmodSync(dir, 0o755);
  server = new EmbeddedPostgres({ dataDir: path.join(dir, 'data'), port: await freePort(), user: 'postgres', password: 'crash' });
  await server.initialise();
  await server.start();
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query('create database crash');
  await admin.end();
  url = server.urlFor('crash');
  await runMigrations(url);
}, 60_000);
afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function alive(pid: number) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('a database crash mid-drain', () => {
  it('loses nothing: every message DONE, each handled at least once', async () => {
    const total = 4_000;
    let database: Database | undefined = createDatabase(url, { max: 12 });
    await database.pool.query(
      `insert into outbox (topic, key, payload) select 'test.crash', 'k' || (i % 500), '{}'::jsonb from generate_series(1, $1::int) i`,
      [total],
    );
    const handled = new Map<string, number>();
    const w = createConfiguredWorker({
      db: database.db,
      config: workerConfig({ url }, { LEASE_SECONDS: '2', POLL_INTERVAL_MS: '50' }),
      registry: new HandlerRegistry([
        testHandler('count', 'test.crash', async (ctx) => void handled.set(ctx.messageId, (handled.get(ctx.messageId) ?? 0) + 1)),
      ]),
      logger: captureLogger('fatal').logger,
      listen: false,
      housekeeping: false,
      batchSize: 200,
      concurrency: 16,
    });
    try {
      await w.start();
      await waitFor(async () => handled.size >= total / 4, 30_000, 'a quarter handled');
      // Crash: immediate shutdown, as a power cut would, then recovery at the next start.
      const pid = server.pid!;
      process.kill(pid, 'SIGQUIT');
      await waitFor(async () => !alive(pid), 60_000, 'the crashed postmaster to be gone');
      await server.start();
      await waitFor(
        async () => {
          const { rows } = await database!.pool.query<{ n: number }>(`select count(*)::int as n from outbox where status = 'DONE'`);
          return rows[0]!.n === total;
        },
        60_000,
        'every message DONE',
      );
      const { rows } = await database.pool.query<{ public_id: string }>(`select public_id from outbox`);
      expect(rows).toHaveLength(total);
      expect(rows.filter((r) => !handled.has(r.public_id))).toEqual([]);
    } finally {
      await w.stop();
      await database?.close();
      database = undefined;
    }
  }, 120_000);
});
