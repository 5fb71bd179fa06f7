import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { createDatabase } from './client.ts';
import { checkMigrationOrder } from './migration-order.ts';
import { afterMigrateSteps } from './after-migrate.ts';
import { pgError } from './pg-errors.ts';

export const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations');

/** An arbitrary constant: the advisory lock every migrating process queues on. */
const MIGRATION_LOCK_ID = 727_001;

/** lock_not_available: a migration's up-front LOCK waited longer than its lock_timeout. */
const LOCK_NOT_AVAILABLE = '55P03';
/** How long a migration keeps trying for its tables: the release before serves meanwhile. */
const LOCK_RETRY_MS = 60_000;

/**
 * Runs the pending migrations (one transaction), again after a pause when they gave up waiting
 * for their tables: a migration that runs beside the processes of the release before takes the
 * tables it alters up front with a short lock_timeout (migrations/0013_trace_context.sql says why),
 * and gives up, rolled back, rather than wait behind them and deadlock.
 */
async function migrateWhenTablesFree(run: () => Promise<void>): Promise<void> {
  const giveUpAt = Date.now() + LOCK_RETRY_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      if (pgError(err)?.code !== LOCK_NOT_AVAILABLE || Date.now() > giveUpAt) throw err;
      await sleep(Math.min(1_000, 50 * attempt) * (0.5 + Math.random()));
    }
  }
}

/**
 * Applies pending migrations. drizzle's migrate() takes no lock of its own, so two processes
 * starting together (API and worker, or two replicas) would race to apply the same migration;
 * a session-level advisory lock makes the second wait and then find nothing to do. Then the steps
 * the application registered run, in order, still under the lock (after-migrate.ts: the outbox's
 * partitions for the days ahead, so every process that starts leaves the outbox writable).
 * Under the lock, and before drizzle runs, the journal's order is checked against what the database
 * has applied (src/db/migration-order.ts): a migration drizzle would skip is refused, not skipped.
 */
export async function runMigrations(databaseUrl: string, migrationsDir: string = MIGRATIONS_DIR): Promise<void> {
  const database = createDatabase(databaseUrl, { max: 2, applicationName: 'stayhub-migrate' });
  const client = await database.pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    try {
      await checkMigrationOrder(client, migrationsDir);
      await migrateWhenTablesFree(() => migrate(database.db, { migrationsFolder: migrationsDir }));
      for (const step of afterMigrateSteps()) await step.run(database.pool);
    } finally {
      await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
    }
  } finally {
    client.release();
    await database.close();
  }
}
