import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { createDatabase } from './client.ts';
import { checkMigrationOrder } from './migration-order.ts';
import { afterMigrateSteps } from './after-migrate.ts';

export const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations');

/** An arbitrary constant: the advisory lock every migrating process queues on. */
const MIGRATION_LOCK_ID = 727_001;

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
      await migrate(database.db, { migrationsFolder: migrationsDir });
      for (const step of afterMigrateSteps()) await step.run(database.pool);
    } finally {
      await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
    }
  } finally {
    client.release();
    await database.close();
  }
}
