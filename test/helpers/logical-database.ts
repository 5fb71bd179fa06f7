import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { EmbeddedPostgres } from '../../src/db/embedded.ts';
import { runMigrations } from '../../src/db/migrate.ts';
import { freePort } from '../../src/net/free-port.ts';
import { registerOutboxHooks } from '../../src/outbox/index.ts';
import { testDatabaseOn, type TestDatabase } from './db.ts';

/**
 * A migrated database on a PostgreSQL of its own at `wal_level = logical`, for the tests of
 * OUTBOX_WRITES=wal: the tests' shared server stays at the default level, so what every other
 * test runs on is what it ran on before the option existed. `drop` stops the server.
 */
export async function logicalTestDatabase(name: string): Promise<TestDatabase> {
  registerOutboxHooks();
  const dir = mkdtempSync(path.join(os.tmpdir(), `stayhub-${name}-`));
  chmodSync(dir, 0o755); // the `postgres` user must reach the data folder
  const server = new EmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    port: await freePort(),
    user: 'postgres',
    password: name,
    settings: { wal_level: 'logical', fsync: 'off', full_page_writes: 'off' },
  });
  await server.initialise();
  await server.start();
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = server.urlFor(name);
  await runMigrations(url);
  return testDatabaseOn(url, name, url, async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
}
