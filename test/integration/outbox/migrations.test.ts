import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createDatabase } from '../../../src/db/client.ts';
import { migrateOutbox, OUTBOX_MIGRATIONS_DIR } from '../../../src/outbox/index.ts';
import { countMessages, insertMessages, outboxMigrations } from '../../../src/outbox/testing.ts';
import { createTestDatabase, urlFor, useTestDatabase } from '../../helpers/db.ts';

/*
 * The outbox's own migrations (src/outbox/migrate.ts): the baseline makes the whole outbox in a
 * database that holds nothing else, the same outbox the application's migrations made before the
 * outbox took its tables over, and a database of the release before adopts it without a change.
 */

const migrated = useTestDatabase('outbox_migrations');

/** Everything of the outbox's a query can tell apart: columns, the parent's indexes and checks, functions. */
async function outboxCatalog(q: pg.Pool): Promise<Record<string, string[]>> {
  const rows = async (text: string) => (await q.query<{ x: string }>(text)).rows.map((r) => r.x);
  return {
    relations: await rows(`
      select c.relname || ' ' || c.relkind::text || ' ' || coalesce(pg_get_partkeydef(c.oid), '') as x
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = 'public' and c.relname in ('outbox', 'outbox_audit', 'outbox_migrations', 'outbox_id_seq', 'outbox_audit_id_seq')
       order by 1`),
    columns: await rows(`
      select table_name || '.' || column_name || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || is_nullable || ' ' || coalesce(column_default, '') as x
        from information_schema.columns c
        join pg_attribute a on a.attrelid = (c.table_name)::regclass and a.attname = c.column_name
       where table_schema = 'public' and table_name in ('outbox', 'outbox_audit', 'outbox_migrations')
       order by table_name, ordinal_position`),
    indexes: await rows(`
      select pg_get_indexdef(i.indexrelid) as x
        from pg_index i join pg_class c on c.oid = i.indrelid
       where c.relname in ('outbox', 'outbox_audit', 'outbox_migrations')
       order by 1`),
    checks: await rows(`
      select conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) as x
        from pg_constraint
       where conrelid in ('outbox'::regclass, 'outbox_audit'::regclass) and contype in ('c', 'p', 'u')
       order by 1`),
    functions: await rows(`
      select pg_get_functiondef(p.oid) as x
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'public' and p.proname like 'outbox%'
       order by 1`),
  };
}

/** A database holding nothing (no application table), dropped after the file. */
const emptyDatabases: string[] = [];
async function emptyDatabase(): Promise<pg.Pool & { url: string }> {
  const name = `outbox_alone_${emptyDatabases.length}_${process.pid}`;
  const admin = new pg.Client({ connectionString: inject('pgServerUrl') });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  emptyDatabases.push(name);
  return Object.assign(new pg.Pool({ connectionString: urlFor(name), max: 4 }), { url: urlFor(name) });
}
afterAll(async () => {
  const admin = new pg.Client({ connectionString: inject('pgServerUrl') });
  await admin.connect();
  for (const name of emptyDatabases) await admin.query(`drop database if exists ${name}`);
  await admin.end();
});

describe('the outbox in a database that holds nothing else', () => {
  it('is made whole by migrateOutbox, as the application migrations made it, and takes messages', async () => {
    const pool = await emptyDatabase();
    try {
      // Two processes starting together: the second waits, then finds nothing to do.
      const [a, b] = await Promise.all([migrateOutbox(pool), migrateOutbox(pool)]);
      expect([...a.applied, ...b.applied]).toEqual(['0000_baseline']);
      expect(a.daysMade.length + b.daysMade.length).toBeGreaterThanOrEqual(8); // today and the week ahead
      expect(await outboxCatalog(pool)).toEqual(await outboxCatalog(migrated.pool));

      const db = createDatabase(pool.url, { max: 2 });
      try {
        const [row] = await insertMessages(db.db, [{ topic: 'thing.happened', key: 'k1' }]);
        expect(row).toMatchObject({ topic: 'thing.happened', status: 'PENDING', attempts: 0 });
        expect(await countMessages(db.pool)).toBe(1);
      } finally {
        await db.close();
      }
    } finally {
      await pool.end();
    }
  });

  it('applies nothing the second time, and makes no day it already has', async () => {
    const pool = await emptyDatabase();
    try {
      await migrateOutbox(pool);
      const before = await outboxCatalog(pool);
      expect(await migrateOutbox(pool)).toEqual({ applied: [], newer: [], daysMade: [] });
      expect(await outboxCatalog(pool)).toEqual(before);
    } finally {
      await pool.end();
    }
  });
});

describe('a database the application migrated', () => {
  it('records the baseline as applied: the migrate run of every process runs the outbox migrations', async () => {
    const { rows } = await migrated.pool.query('select id, name from outbox_migrations order by id');
    expect(rows).toEqual(outboxMigrations().map((m) => ({ id: m.id, name: m.name })));
  });

  it('of the release before adopts the baseline without changing a thing, its messages kept', async () => {
    const tdb = await createTestDatabase('outbox_adopt');
    try {
      // The release before had no outbox_migrations: its outbox came from the application's migrations.
      await tdb.pool.query('drop table outbox_migrations');
      await insertMessages(tdb.db, [{ topic: 'thing.happened', key: 'k1' }, { topic: 'thing.happened' }]);
      const before = await outboxCatalog(tdb.pool);
      const run = await migrateOutbox(tdb.pool);
      expect(run.applied).toEqual(['0000_baseline']);
      const after = await outboxCatalog(tdb.pool);
      const withoutRecords = Object.fromEntries(
        Object.entries(after).map(([kind, lines]) => [kind, lines.filter((l) => !/\boutbox_migrations\b/.test(l))]),
      );
      expect(withoutRecords).toEqual(before);
      expect(after.relations).toContain('outbox_migrations r ');
      expect(await countMessages(tdb.pool)).toBe(2);
    } finally {
      await tdb.drop();
    }
  });

  it('leaves a migration a newer release recorded as it is (workers of two releases run side by side)', async () => {
    const tdb = await createTestDatabase('outbox_newer');
    try {
      await tdb.pool.query(`insert into outbox_migrations (id, name) values (${outboxMigrations().length}, 'of_a_newer_release')`);
      expect(await migrateOutbox(tdb.pool)).toEqual({ applied: [], newer: [outboxMigrations().length], daysMade: [] });
    } finally {
      await tdb.drop();
    }
  });
});

describe('a migration that fails', () => {
  it('leaves nothing of itself behind, is not recorded, and says which one it was', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-outbox-migrations-'));
    const tdb = await createTestDatabase('outbox_broken');
    try {
      cpSync(OUTBOX_MIGRATIONS_DIR, dir, { recursive: true });
      writeFileSync(path.join(dir, '0001_half_done.sql'), 'create table outbox_half (id int);\nselect 1 / 0;\n');
      await expect(migrateOutbox(tdb.pool, dir)).rejects.toThrow(/outbox migration 0001_half_done failed: division by zero/);
      const { rows } = await tdb.pool.query(`select to_regclass('outbox_half') as t, (select max(id) from outbox_migrations) as last`);
      expect(rows[0]).toEqual({ t: null, last: 0 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await tdb.drop();
    }
  });

  it('is refused before anything runs when the files skip or repeat a number', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-outbox-migrations-'));
    try {
      cpSync(OUTBOX_MIGRATIONS_DIR, dir, { recursive: true });
      writeFileSync(path.join(dir, '0002_skipped_one.sql'), 'select 1;\n');
      expect(() => outboxMigrations(dir)).toThrow(/0002_skipped_one: numbers run 0000, 0001, … without gaps or repeats/);
      writeFileSync(path.join(dir, 'add-a-column.sql'), 'select 1;\n');
      expect(() => outboxMigrations(dir)).toThrow(/add-a-column.sql: name it NNNN_name.sql/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
