import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createDatabase } from '../../../src/db/client.ts';
import { ensureOutboxPartitions, migrateOutbox, OUTBOX_MIGRATIONS_DIR } from '../../../src/outbox/index.ts';
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

const tagOf = (m: { id: number; name: string }) => `${String(m.id).padStart(4, '0')}_${m.name}`;
const ALL_TAGS = outboxMigrations().map(tagOf);

/** A folder of the outbox's migrations up to number `last`, as a release before had them. */
const folders: string[] = [];
function migrationsUpTo(last: number): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-outbox-migrations-'));
  folders.push(dir);
  for (const m of outboxMigrations().slice(0, last + 1))
    copyFileSync(path.join(OUTBOX_MIGRATIONS_DIR, `${tagOf(m)}.sql`), path.join(dir, `${tagOf(m)}.sql`));
  return dir;
}
afterAll(() => {
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
});

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
      expect([...a.applied, ...b.applied]).toEqual(ALL_TAGS);
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

/**
 * A migrated database turned back into one of the release before the outbox's own migrations: no
 * outbox_migrations, and what the outbox's migrations after the baseline (0001–0004) changed put
 * back as the application's migrations had made it (the baseline's text, which the test above
 * keeps equal).
 */
async function asTheReleaseBefore(pool: pg.Pool): Promise<void> {
  await pool.query('drop table outbox_migrations');
  await pool.query(`create index outbox_pending_created_idx on outbox (created_at) where status = 'PENDING'`);
  await pool.query(`create index outbox_done_processed_idx on outbox (processed_at) where status = 'DONE'`);
  await pool.query('drop index outbox_done_processed_brin');
  await pool.query('drop trigger outbox_public_id_from_row on outbox');
  await pool.query('drop function outbox_derive_public_id(), outbox_public_id(timestamptz, bigint)');
  await pool.query('alter table outbox alter column public_id set default outbox_uuid_v7()');
  const { rows } = await pool.query<{ part: string }>(
    `select c.relname as part from pg_inherits i join pg_class c on c.oid = i.inhrelid
      where i.inhparent = 'outbox'::regclass
        and not exists (select 1 from pg_constraint k where k.conrelid = c.oid and k.contype = 'u')`,
  );
  for (const { part } of rows) await pool.query(`alter table ${part} add constraint ${part}_public_id_key unique (public_id)`);
  const baseline = readFileSync(path.join(OUTBOX_MIGRATIONS_DIR, `${ALL_TAGS[0]}.sql`), 'utf8');
  await pool.query(baseline.slice(baseline.indexOf('CREATE OR REPLACE FUNCTION outbox_ensure_partitions')));
  // 0004's outbox_turn back to the baseline's, planned on every call.
  const turn = baseline.indexOf('CREATE OR REPLACE FUNCTION outbox_turn(grp text, own text, prio integer)');
  await pool.query(baseline.slice(turn, baseline.indexOf('-- The two-argument form', turn)));
}

describe('a database the application migrated', () => {
  it('records the baseline as applied: the migrate run of every process runs the outbox migrations', async () => {
    const { rows } = await migrated.pool.query('select id, name from outbox_migrations order by id');
    expect(rows).toEqual(outboxMigrations().map((m) => ({ id: m.id, name: m.name })));
  });

  it('of the release before adopts the baseline without changing a thing, its messages kept', async () => {
    const tdb = await createTestDatabase('outbox_adopt');
    try {
      // The release before had no outbox_migrations: its outbox came from the application's migrations.
      await asTheReleaseBefore(tdb.pool);
      await insertMessages(tdb.db, [{ topic: 'thing.happened', key: 'k1' }, { topic: 'thing.happened' }]);
      const before = await outboxCatalog(tdb.pool);
      const run = await migrateOutbox(tdb.pool, migrationsUpTo(0));
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
      await ensureOutboxPartitions(tdb.pool); // the day a run that crossed midnight since its template lacks
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
      const next = outboxMigrations().length;
      writeFileSync(path.join(dir, `${tagOf({ id: next, name: 'half_done' })}.sql`), 'create table outbox_half (id int);\nselect 1 / 0;\n');
      await expect(migrateOutbox(tdb.pool, dir)).rejects.toThrow(
        new RegExp(`outbox migration ${tagOf({ id: next, name: 'half_done' })} failed: division by zero`),
      );
      const { rows } = await tdb.pool.query(`select to_regclass('outbox_half') as t, (select max(id) from outbox_migrations) as last`);
      expect(rows[0]).toEqual({ t: null, last: next - 1 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await tdb.drop();
    }
  });

  it('is refused before anything runs when the files skip or repeat a number', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-outbox-migrations-'));
    try {
      cpSync(OUTBOX_MIGRATIONS_DIR, dir, { recursive: true });
      const skipped = tagOf({ id: outboxMigrations().length + 1, name: 'skipped_one' });
      writeFileSync(path.join(dir, `${skipped}.sql`), 'select 1;\n');
      expect(() => outboxMigrations(dir)).toThrow(new RegExp(`${skipped}: numbers run 0000, 0001, … without gaps or repeats`));
      writeFileSync(path.join(dir, 'add-a-column.sql'), 'select 1;\n');
      expect(() => outboxMigrations(dir)).toThrow(/add-a-column.sql: name it NNNN_name.sql/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** The outbox's index names, the parent's and every day's, that match `like`. */
async function indexesLike(q: pg.Pool, like: string): Promise<string[]> {
  const { rows } = await q.query<{ name: string }>(
    `select c.relname as name from pg_index i join pg_class c on c.oid = i.indexrelid
      where i.indrelid in (select relid from pg_partition_tree('outbox')) and pg_get_indexdef(i.indexrelid) like $1
      order by 1`,
    [like],
  );
  return rows.map((r) => r.name);
}

/**
 * Each migration of the lean storage (ADR 0051) on a database of the release before it: applied
 * once, its change made on the parent and every day, the messages kept, and its SQL run a second
 * time changes nothing.
 */
describe('the lean storage, one migration at a time', () => {
  async function upgrade(last: number, check: (pool: pg.Pool, phase: 'before' | 'after') => Promise<void>): Promise<void> {
    const pool = await emptyDatabase();
    try {
      await migrateOutbox(pool, migrationsUpTo(last - 1));
      await pool.query(`insert into outbox (topic, key, payload) select 'thing.happened', 'k' || i, '{}' from generate_series(1, 3) i`);
      await check(pool, 'before');
      const run = await migrateOutbox(pool, migrationsUpTo(last));
      expect(run.applied).toEqual([ALL_TAGS[last]]);
      await check(pool, 'after');
      const after = await outboxCatalog(pool);
      const sql = readFileSync(path.join(OUTBOX_MIGRATIONS_DIR, `${ALL_TAGS[last]}.sql`), 'utf8');
      await pool.query(`begin;\n${sql}\ncommit;`);
      expect(await outboxCatalog(pool)).toEqual(after);
      expect(await migrateOutbox(pool, migrationsUpTo(last))).toMatchObject({ applied: [] });
      expect(await countMessages(pool)).toBe(3);
    } finally {
      await pool.end();
    }
  }

  it("0001 drops the PENDING rows' created_at index, from the parent and every day", async () => {
    await upgrade(1, async (pool, phase) => {
      const found = await indexesLike(pool, "%(created_at) WHERE (status = 'PENDING'::text)");
      if (phase === 'before')
        expect(found.length).toBeGreaterThanOrEqual(9); // the parent's, and today's and the week ahead's
      else expect(found).toEqual([]);
    });
  });

  it('0002 makes processed_at a BRIN index of DONE rows, on the parent and every day, days made later included', async () => {
    await upgrade(2, async (pool, phase) => {
      const btree = await indexesLike(pool, "%USING btree (processed_at) WHERE (status = 'DONE'::text)");
      const brin = await indexesLike(pool, "%USING brin (processed_at) WITH (autosummarize='on') WHERE (status = 'DONE'::text)");
      const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from pg_partition_tree('outbox')`);
      if (phase === 'before') {
        expect(btree).toHaveLength(rows[0]!.n);
        expect(brin).toEqual([]);
      } else {
        expect(btree).toEqual([]);
        expect(brin).toHaveLength(rows[0]!.n);
        await pool.query(`select outbox_ensure_partitions(now() + interval '10 days', 0)`);
        expect(await indexesLike(pool, '%USING brin (processed_at)%')).toHaveLength(rows[0]!.n + 3);
      }
    });
  });

  it('0003 derives public ids from the row: days that hold rows keep their unique index, the others and days made later lose it', async () => {
    const uniqueDays = async (pool: pg.Pool) =>
      (await indexesLike(pool, '%UNIQUE INDEX%(public_id)')).map((name) => name.replace(/_public_id_key$/, ''));
    await upgrade(3, async (pool, phase) => {
      const { rows: days } = await pool.query<{ name: string }>(
        `select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'outbox'::regclass order by 1`,
      );
      const { rows: held } = await pool.query<{ name: string }>(`select distinct tableoid::regclass::text as name from outbox`);
      if (phase === 'before') {
        expect(await uniqueDays(pool)).toEqual(days.map((d) => d.name));
        return;
      }
      expect(await uniqueDays(pool)).toEqual(held.map((d) => d.name)); // the day with the three messages
      const { rows: fresh } = await pool.query<{ derived: boolean }>(
        `insert into outbox (topic, payload) values ('thing.happened', '{}') returning public_id = outbox_public_id(created_at, id) as derived`,
      );
      expect(fresh).toEqual([{ derived: true }]);
      await pool.query(`delete from outbox where key is null`);
      const { rows: old } = await pool.query<{ derived: boolean }>(
        `select public_id = outbox_public_id(created_at, id) as derived from outbox where key is not null`,
      );
      expect(old.map((r) => r.derived)).toEqual([false, false, false]); // as the release before wrote them
      await pool.query(`select outbox_ensure_partitions(now() + interval '10 days', 0)`);
      expect(await uniqueDays(pool)).toEqual(held.map((d) => d.name));
    });
  });
});
