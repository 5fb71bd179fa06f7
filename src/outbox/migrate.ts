import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

/*
 * The outbox's own migrations: its tables, indexes and SQL functions are made and changed by the
 * files in src/outbox/migrations/, applied in the order of their numbers and recorded in
 * outbox_migrations, never by the application's migrations (which made them until the outbox took
 * them over: migrations/0019_outbox_keeps_its_own_tables.sql, ADR 0050). The first file is the
 * baseline: the whole outbox as the application's migrations had left it, written so that it
 * makes it in an empty database and changes nothing in one that already holds it.
 *
 * Why not drizzle's migrator: it applies by the journal's time stamps (src/db/migration-order.ts
 * guards that), and the outbox's statements are hand-written SQL anyway. A file is run in one
 * transaction with its record, so a failed migration leaves nothing half done.
 *
 * A rolling deploy runs workers of two releases side by side, each migrating as it starts: a worker
 * of the release before finds migrations recorded that it does not know, and goes on (the newer
 * files are written so the release before keeps working beside them).
 */

export const OUTBOX_MIGRATIONS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'migrations');

/** An arbitrary constant: the advisory lock outbox migrations queue on (a database-wide name). */
const OUTBOX_MIGRATION_LOCK_ID = 727_050;

interface OutboxMigration {
  id: number;
  name: string;
  sql: string;
}

const tag = (m: { id: number; name: string }) => `${String(m.id).padStart(4, '0')}_${m.name}`;

/** The migrations in `dir`: files named NNNN_name.sql, in the order of their numbers, which must not repeat. */
export function outboxMigrations(dir: string = OUTBOX_MIGRATIONS_DIR): OutboxMigration[] {
  const found = readdirSync(dir)
    .filter((f) => f.endsWith('.sql'))
    .map((file) => {
      const m = /^(\d{4})_([a-z0-9_]+)\.sql$/.exec(file);
      if (!m) throw new Error(`outbox migration ${file}: name it NNNN_name.sql (four digits, then a-z, 0-9 and _)`);
      return { id: Number(m[1]), name: m[2]!, sql: readFileSync(path.join(dir, file), 'utf8') };
    })
    .sort((a, b) => a.id - b.id);
  found.forEach((m, i) => {
    if (m.id !== i) throw new Error(`outbox migration ${tag(m)}: numbers run 0000, 0001, … without gaps or repeats`);
  });
  return found;
}

/** What one migrateOutbox did. */
export interface OutboxMigrationRun {
  /** Migrations applied by this run, as NNNN_name. */
  applied: string[];
  /** Migrations the database has that this code does not know (a newer release ran): left as they are. */
  newer: number[];
  /** The day partitions made (outbox_ensure_partitions), by their table names. */
  daysMade: string[];
}

/**
 * Brings the outbox's storage up to this code: the migrations the database has not recorded, each
 * in its own transaction, then its partitions for the week ahead, so the outbox is writable when it
 * returns. Safe to run from every process at start (an advisory lock makes the others wait and then
 * find nothing to do), and in a database that holds nothing else: the outbox needs no table of the
 * application's.
 */
export async function migrateOutbox(pool: pg.Pool, dir: string = OUTBOX_MIGRATIONS_DIR): Promise<OutboxMigrationRun> {
  const migrations = outboxMigrations(dir);
  const client = await pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [OUTBOX_MIGRATION_LOCK_ID]);
    try {
      await client.query(`
        create table if not exists outbox_migrations (
          id integer primary key,
          name text not null,
          applied_at timestamptz not null default now()
        )`);
      const { rows } = await client.query<{ id: number }>('select id from outbox_migrations order by id');
      const recorded = new Set(rows.map((r) => r.id));
      const run: OutboxMigrationRun = { applied: [], newer: rows.map((r) => r.id).filter((id) => id >= migrations.length), daysMade: [] };
      for (const m of migrations) {
        if (recorded.has(m.id)) continue;
        await client.query('begin');
        try {
          await client.query(m.sql);
          await client.query('insert into outbox_migrations (id, name) values ($1, $2)', [m.id, m.name]);
          await client.query('commit');
        } catch (err) {
          await client.query('rollback');
          throw new Error(`outbox migration ${tag(m)} failed: ${(err as Error).message}`, { cause: err });
        }
        run.applied.push(tag(m));
      }
      const days = await client.query<{ made: string[] }>('select outbox_ensure_partitions() as made');
      run.daysMade = days.rows[0]?.made ?? [];
      return run;
    } finally {
      await client.query('select pg_advisory_unlock($1)', [OUTBOX_MIGRATION_LOCK_ID]);
    }
  } finally {
    client.release();
  }
}
