import { randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { ensureOutboxPartitions, partitionsAheadSeconds, purgeOutbox, housekeepOnce } from '../../../src/outbox/index.ts';
import {
  connectClaimClient,
  claimOn,
  dropExpiredOutboxPartitions,
  listOutboxPartitions,
  markDoneMany,
} from '../../../src/outbox/testing.ts';
import { MIGRATIONS_DIR, runMigrations } from '../../../src/db/migrate.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { migrateCommand } from '../../../src/commands/migrate.ts';
import { book, buildTestApp, listProperty, signUp } from '../../helpers/app.ts';
import { urlFor, useTestDatabase } from '../../helpers/db.ts';
import { runInProcess } from '../../helpers/npm-run.ts';
import { dayName, detachDay, layOutPastDays, tableState } from '../../helpers/outbox-partitions.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';

/*
 * The outbox partitioned by day (src/outbox/partitions.ts, migrations/0008_partitioned_outbox.sql):
 * the days ahead, which days go whole and which wait, an interrupted detach, the claim's order
 * across days, the migration of an outbox that already holds messages, and what a missing day, a
 * day left detached and a stray table in a coming day's name do (migrations/0011, ADR 0025).
 */

const tdb = useTestDatabase('parts');
const DAY = 86_400_000;

/** The partition a row lives in. */
async function partitionOf(id: number): Promise<string> {
  const { rows } = await tdb.pool.query(`select tableoid::regclass::text as name from outbox where id = $1`, [id]);
  return rows[0].name;
}

/** Inserts a message; `ago` days for created_at, `processedAgo` days for processed_at. */
async function insert(opts: { status: string; ago: number; processedAgo?: number; key?: string }): Promise<number> {
  const { rows } = await tdb.pool.query(
    `insert into outbox (topic, payload, status, key, created_at, available_at, processed_at)
     values ('test.t', '{}', $1, $2, now() - make_interval(days => $3), now() - make_interval(days => $3),
             case when $4::int is null then null else now() - make_interval(days => $4::int) end)
     returning id::int`,
    [opts.status, opts.key ?? null, opts.ago, opts.processedAgo ?? null],
  );
  return rows[0].id;
}

describe('the days ahead', () => {
  it('reach a week past today after migrating, and a second call makes nothing', async () => {
    // The test database was migrated when the run began; a run that crossed midnight since has a
    // day to make, as a worker's housekeeping would.
    const now = new Date();
    await ensureOutboxPartitions(tdb.pool, { now });
    const parts = await listOutboxPartitions(tdb.pool);
    expect(parts[0]!.from).toBeNull(); // the first partition: everything before it was partitioned
    for (let i = 1; i < parts.length; i++) expect(parts[i]!.from!.getTime()).toBe(parts[i - 1]!.to.getTime()); // no gap
    const ahead = await partitionsAheadSeconds(tdb.pool, now);
    expect(ahead).toBeGreaterThan(7 * 86_400);
    expect(ahead).toBeLessThanOrEqual(8 * 86_400);
    expect(await ensureOutboxPartitions(tdb.pool, { now })).toEqual([]);
  });

  it('two processes making the same days at once make each day once', async () => {
    const now = new Date();
    await ensureOutboxPartitions(tdb.pool, { now }); // the days a run that crossed midnight lacks
    const later = new Date(now.getTime() + 3 * DAY);
    const [a, b] = await Promise.all([ensureOutboxPartitions(tdb.pool, { now: later }), ensureOutboxPartitions(tdb.pool, { now: later })]);
    expect([...a, ...b]).toHaveLength(3);
    expect(new Set([...a, ...b]).size).toBe(3);
    const parts = await listOutboxPartitions(tdb.pool);
    expect(parts.at(-1)!.to.getTime() - now.getTime()).toBeGreaterThan(10 * DAY);
  });
});

/** An empty outbox laid out with a partition per day from 12 days ago. */
async function pastDays() {
  await tdb.pool.query('truncate outbox');
  await layOutPastDays(tdb.pool, 12);
}

describe('the purge by day', () => {
  beforeEach(pastDays);

  it('drops a day whose rows are all DONE past the retention; a day with anything else waits, its old DONE rows deleted one by one', async () => {
    const gone = [await insert({ status: 'DONE', ago: 5, processedAgo: 5 }), await insert({ status: 'DONE', ago: 5, processedAgo: 4 })];
    const goneDay = await partitionOf(gone[0]!);
    const pendingDay = [await insert({ status: 'PENDING', ago: 6 }), await insert({ status: 'DONE', ago: 6, processedAgo: 6 })];
    const deadDay = [await insert({ status: 'DEAD', ago: 7, processedAgo: 7 }), await insert({ status: 'DONE', ago: 7, processedAgo: 7 })];
    const lateDay = [await insert({ status: 'DONE', ago: 8, processedAgo: 1 })]; // finished yesterday: within the retention
    const recent = [await insert({ status: 'DONE', ago: 1, processedAgo: 1 })]; // its day is within the retention
    await tdb.pool.query('analyze outbox'); // a dropped day's rows are counted from its statistics

    const purged = await purgeOutbox(tdb.db, { retentionDays: 2 });

    // The day with its two rows, and the empty days past the retention with it.
    expect(purged.partitions.map((p) => p.name)).toContain(goneDay);
    expect(purged.partitions.length).toBeGreaterThan(1);
    expect(purged.rows).toBe(2 + 2); // the dropped day's two (counted by ANALYZE, below), and the DONE rows beside the PENDING and the DEAD one
    expect((await tdb.pool.query(`select to_regclass($1) as t`, [goneDay])).rows[0].t).toBeNull();
    const { rows } = await tdb.pool.query(`select id::int from outbox order by id`);
    expect(rows.map((r) => r.id)).toEqual([pendingDay[0], deadDay[0], lateDay[0], recent[0]]);
  });

  it('finishes a detach that was interrupted between its two phases, then drops the day', async () => {
    const id = await insert({ status: 'DONE', ago: 10, processedAgo: 10 });
    const day = await partitionOf(id);
    // A transaction that holds a snapshot makes DETACH … CONCURRENTLY wait in its second phase;
    // cancelling it there leaves the partition "detach pending", as a worker killed mid-purge would.
    const reader = new pg.Client({ connectionString: tdb.url });
    const detacher = new pg.Client({ connectionString: tdb.url });
    await reader.connect();
    await detacher.connect();
    try {
      await reader.query('begin isolation level repeatable read');
      await reader.query('select count(*) from outbox');
      const pid = (await detacher.query(`select pg_backend_pid() as pid`)).rows[0].pid;
      const detach = detacher.query(`alter table outbox detach partition ${day} concurrently`).then(
        () => 'finished',
        (err: Error) => err.message,
      );
      // Its first phase has committed (the partition is marked) and it waits for the reader.
      for (const until = Date.now() + 30_000; ; await new Promise((r) => setTimeout(r, 50))) {
        if (Date.now() > until) throw new Error('DETACH CONCURRENTLY never reached its second phase');
        const marked = (await listOutboxPartitions(tdb.pool)).find((p) => p.name === day)?.detachPending;
        const { rows } = await tdb.pool.query(`select wait_event_type from pg_stat_activity where pid = $1`, [pid]);
        if (marked && rows[0]?.wait_event_type === 'Lock') break;
      }
      await tdb.pool.query('select pg_cancel_backend($1)', [pid]);
      await reader.query('rollback'); // before waiting for the detach: had the cancel missed, it finishes
      expect(await detach).toMatch(/cancel/);
    } finally {
      await reader.end();
      await detacher.end();
    }
    const pending = (await listOutboxPartitions(tdb.pool)).find((p) => p.name === day);
    expect(pending?.detachPending).toBe(true);

    const dropped = await dropExpiredOutboxPartitions(tdb.pool, { retentionDays: 2 });
    expect(dropped.map((p) => p.name)).toContain(day);
    expect((await listOutboxPartitions(tdb.pool)).some((p) => p.name === day)).toBe(false);
  });
});

describe('the claim across days', () => {
  it("keeps a key's order when its messages are in different days, and settles a message of an older day", async () => {
    await pastDays();
    const key = randomUUID();
    const older = await insert({ status: 'PENDING', ago: 3, key });
    const { rows } = await tdb.pool.query(`insert into outbox (topic, payload, key) values ('test.t', '{}', $1) returning id::int`, [key]);
    const newer = rows[0].id as number;
    expect(await partitionOf(older)).not.toBe(await partitionOf(newer));

    const c = await connectClaimClient({ connectionString: tdb.url });
    try {
      const first = await claimOn(c, { limit: 10, leaseSeconds: 60, claimId: randomUUID() });
      expect(first.map((m) => m.id)).toEqual([older]); // the newer one waits for it
      expect(
        await markDoneMany(tdb.db, [{ id: older, claimId: first[0]!.claimId, lastHandler: null, createdAtMs: first[0]!.createdAtMs }]),
      ).toEqual([true]);
      const second = await claimOn(c, { limit: 10, leaseSeconds: 60, claimId: randomUUID() });
      expect(second.map((m) => m.id)).toEqual([newer]);
    } finally {
      await c.end();
    }
    const { rows: done } = await tdb.pool.query(`select status from outbox where id = $1`, [older]);
    expect(done).toEqual([{ status: 'DONE' }]);
  });
});

describe('migrating an outbox that already holds messages', () => {
  const name = `partmig_${randomUUID().slice(0, 8)}`;
  let dir: string;
  const admin = () => new pg.Client({ connectionString: inject('pgServerUrl') });

  beforeAll(async () => {
    const c = admin();
    await c.connect();
    await c.query(`create database ${name}`);
    await c.end();
    // The migrations before partitioning, alone: a database as an earlier release left it.
    dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-premigrations-'));
    cpSync(MIGRATIONS_DIR, dir, { recursive: true });
    const journalPath = path.join(dir, 'meta', '_journal.json');
    const journal = JSON.parse(readFileSync(journalPath, 'utf8'));
    const at = journal.entries.findIndex((e: { tag: string }) => e.tag === '0008_partitioned_outbox');
    journal.entries = journal.entries.slice(0, at);
    writeFileSync(journalPath, JSON.stringify(journal));
    const pool = new pg.Pool({ connectionString: urlFor(name), max: 1 });
    try {
      await migrate(drizzle(pool), { migrationsFolder: dir });
    } finally {
      await pool.end();
    }
  });
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    const c = admin();
    await c.connect();
    await c.query(`drop database if exists ${name} with (force)`);
    await c.end();
  });

  it('keeps every message, its id and state, and goes on numbering and claiming', async () => {
    const pool = new pg.Pool({ connectionString: urlFor(name), max: 2 });
    try {
      const { rows: isPartitioned } = await pool.query(`select relkind from pg_class where relname = 'outbox'`);
      expect(isPartitioned).toEqual([{ relkind: 'r' }]); // a plain table before
      await pool.query(`
        insert into outbox (topic, payload, key, status, processed_at, created_at)
        select 'test.t', jsonb_build_object('i', i), 'k' || (i % 5),
               case when i % 10 = 0 then 'DEAD' when i <= 700 then 'DONE' else 'PENDING' end,
               case when i <= 700 or i % 10 = 0 then now() - interval '20 days' end,
               now() - interval '30 days' + i * interval '1 minute'
          from generate_series(1, 1000) i`);
      const before = (await pool.query(`select id::int, public_id, status, key, payload from outbox order by id`)).rows;

      await runMigrations(urlFor(name));

      expect((await pool.query(`select relkind from pg_class where relname = 'outbox'`)).rows).toEqual([{ relkind: 'p' }]);
      const after = (await pool.query(`select id::int, public_id, status, key, payload from outbox order by id`)).rows;
      expect(after).toEqual(before);
      const parts = await listOutboxPartitions(pool);
      expect(parts[0]!.name).toMatch(/^outbox_until_\d{8}$/);
      expect(parts.length).toBeGreaterThanOrEqual(8); // the first, and a week of days ahead
      // Every old row is in the first partition, and the old indexes serve it (attached, not
      // duplicated); the claim's two and the groups' were made by migration 0014, the owners' by 0015,
      // named by PostgreSQL. The PENDING rows' created_at index went with the outbox's migration 0001, and
      // processed_at's B-tree became a BRIN index with 0002.
      expect((await pool.query(`select count(*)::int as n from ${parts[0]!.name}`)).rows[0].n).toBe(1000);
      const { rows: idx } = await pool.query(`select indexname from pg_indexes where tablename = $1 order by 1`, [parts[0]!.name]);
      expect(idx.map((r) => r.indexname.replace(parts[0]!.name, 'P'))).toEqual([
        'P_available_at_id_idx',
        'P_dead_idx',
        'P_group_id_priority_turn_idx',
        'P_key_id_idx',
        'P_owner_id_priority_turn_idx',
        'P_pkey',
        'P_priority_turn_id_idx',
        'P_processed_at_idx',
        'P_public_id_key',
      ]);

      // New messages are numbered after the old ones and go to their day.
      const { rows: fresh } = await pool.query(`insert into outbox (topic, payload, key) values ('test.t', '{}', 'k1') returning id::int`);
      expect(fresh[0].id).toBeGreaterThan(Math.max(...before.map((r) => r.id)));

      // The claim takes the oldest due messages, one per key, from the old rows first.
      const c = await connectClaimClient({ connectionString: urlFor(name) });
      try {
        const claimed = await claimOn(c, { limit: 100, leaseSeconds: 60, claimId: randomUUID() });
        const oldestPerKey = new Map<string, number>();
        for (const r of before) if (r.status === 'PENDING' && !oldestPerKey.has(r.key)) oldestPerKey.set(r.key, r.id);
        expect(oldestPerKey.size).toBe(5);
        expect(claimed.map((m) => m.id).sort((a, b) => a - b)).toEqual([...oldestPerKey.values()].sort((a, b) => a - b));
      } finally {
        await c.end();
      }

      // Dropping the first partition (days from now, once it has expired) does not take the id
      // sequence with it: the next message, in a later day, is still numbered.
      await pool.query('truncate outbox');
      await pool.query(`alter table outbox detach partition ${parts[0]!.name}`);
      await pool.query(`drop table ${parts[0]!.name}`);
      const { rows: next } = await pool.query(
        `insert into outbox (topic, payload, created_at) values ('test.t', '{}', now() + interval '2 days') returning id::int`,
      );
      expect(next[0].id).toBeGreaterThan(fresh[0].id);
    } finally {
      await pool.end();
    }
  });
});

/** An empty outbox whose days from `daysBack` days ago each have a partition: fewer days, a quicker lay-out. */
const daysFrom = (daysBack: number) => async () => {
  await tdb.pool.query('truncate outbox');
  await layOutPastDays(tdb.pool, daysBack);
};

describe('a missing day', () => {
  beforeEach(daysFrom(1)); // today in a partition of its own

  it("today's partition dropped by hand: the next booking is made (201), the day with it, and its emails go out", async () => {
    const today = dayName(0);
    await detachDay(tdb.pool, today);
    await tdb.pool.query(`drop table ${today}`);
    await expect(tdb.pool.query(`insert into outbox (topic, payload) values ('test.t', '{}')`)).rejects.toThrow(/no partition/);

    const { app } = await buildTestApp(tdb);
    try {
      const host = await signUp(app, 'host');
      const guest = await signUp(app, 'guest');
      const property = await listProperty(app, host);
      const res = await book(app, guest, { propertyId: property.id, inDays: 10, nights: 2 });
      expect(res.statusCode, res.body).toBe(201);
    } finally {
      await app.close();
    }
    expect(await tableState(tdb.pool, today)).toBe('partition');
    const { rows } = await tdb.pool.query(`select tableoid::regclass::text as day from outbox where topic = 'booking.created'`);
    expect(rows).toEqual([{ day: today }]);

    const mailDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-'));
    try {
      const code = await drainOutbox({
        argv: ['--until-empty'],
        env: { DATABASE_URL: tdb.url, LOG_LEVEL: 'silent', MAIL_DIR: mailDir, ENV_FILE: '' },
      });
      expect(code).toBe(0);
      expect(readdirSync(mailDir).filter((f) => f.endsWith('.eml'))).toHaveLength(2); // the guest's and the host's
      const { rows: left } = await tdb.pool.query(`select count(*)::int as n from outbox where status <> 'DONE'`);
      expect(left[0].n).toBe(0);
    } finally {
      rmSync(mailDir, { recursive: true, force: true });
    }
  });

  it('a hole among the days ahead is made again by the next call, and only the hole', async () => {
    await detachDay(tdb.pool, dayName(2));
    await tdb.pool.query(`drop table ${dayName(2)}`);
    expect(await ensureOutboxPartitions(tdb.pool)).toEqual([dayName(2)]);
  });
});

describe('a day left detached', () => {
  beforeEach(daysFrom(5));

  it('past the retention with nothing but old DONE rows: its interrupted drop is finished', async () => {
    const day = await partitionOf(await insert({ status: 'DONE', ago: 4, processedAgo: 4 }));
    await detachDay(tdb.pool, day);
    expect(await tableState(tdb.pool, day)).toBe('alone');

    const counts = await housekeepOnce(tdb.db, { retentionDays: 2 });

    expect(await tableState(tdb.pool, day)).toBe('absent');
    expect(counts.outboxPartitionsDropped).toBeGreaterThan(1); // it, and the empty days past the retention
  });

  it('holding a PENDING message and a DEAD letter: attached again, and the message is claimed', async () => {
    const pending = await insert({ status: 'PENDING', ago: 4 });
    const dead = await insert({ status: 'DEAD', ago: 4, processedAgo: 4 });
    const day = await partitionOf(pending);
    await detachDay(tdb.pool, day);
    const { logger, entries } = captureLogger();

    await housekeepOnce(tdb.db, { retentionDays: 2, log: logger });

    expect(await tableState(tdb.pool, day)).toBe('partition');
    expect(entries()).toContainEqual(expect.objectContaining({ tables: [day], msg: expect.stringMatching(/given back to the outbox/) }));
    const c = await connectClaimClient({ connectionString: tdb.url });
    try {
      expect((await claimOn(c, { limit: 10, leaseSeconds: 60, claimId: randomUUID() })).map((m) => m.id)).toEqual([pending]);
    } finally {
      await c.end();
    }
    expect((await tdb.pool.query(`select status from outbox where id = $1`, [dead])).rows).toEqual([{ status: 'DEAD' }]);
  });

  it("today's: the next write that finds no partition adopts it again, and its message is kept", async () => {
    const today = dayName(0);
    const [held] = (await tdb.pool.query(`insert into outbox (topic, payload) values ('test.t', '{}') returning id::int`)).rows;
    await detachDay(tdb.pool, today);
    await expect(tdb.pool.query(`insert into outbox (topic, payload) values ('test.t', '{}')`)).rejects.toThrow(/no partition/);

    expect(await ensureOutboxPartitions(tdb.pool)).toEqual([today]); // what a booking that found no partition calls

    expect(await tableState(tdb.pool, today)).toBe('partition');
    const [fresh] = (await tdb.pool.query(`insert into outbox (topic, payload) values ('test.t', '{}') returning id::int`)).rows;
    const { rows } = await tdb.pool.query(`select id::int, tableoid::regclass::text as day from outbox order by id`);
    expect(rows).toEqual([
      { id: held.id, day: today },
      { id: fresh.id, day: today },
    ]);
  });

  it('not shaped like the outbox: left as it is, with the fix in one line', async () => {
    const stray = 'outbox_20200101';
    await tdb.pool.query(`create table ${stray} (note text)`);
    await tdb.pool.query(`insert into ${stray} values ('kept')`);

    const purged = await purgeOutbox(tdb.db, { retentionDays: 2 });

    expect(purged.detached.stuck).toHaveLength(1);
    expect(purged.detached.stuck[0]!.reason).toMatch(
      new RegExp(
        `^the table ${stray}, .*: look at its rows, then rename it \\(ALTER TABLE ${stray} RENAME TO ${stray}_leftover\\) or drop it$`,
      ),
    );
    expect(purged.detached.stuck[0]!.reason).not.toContain('\n');
    expect((await tdb.pool.query(`select note from ${stray}`)).rows).toEqual([{ note: 'kept' }]);
    await tdb.pool.query(`drop table ${stray}`);
  });
});

describe('a table named like a coming day', () => {
  beforeEach(async () => {
    await tdb.pool.query('truncate outbox');
    await ensureOutboxPartitions(tdb.pool); // the days ahead, whatever the test before left
  });

  const env = () => ({ ...process.env, DATABASE_URL: tdb.url, LOG_LEVEL: 'silent', ENV_FILE: '' });

  it('an outbox day detached and left behind is adopted: migrate and the housekeeping go on, and its message is kept', async () => {
    const coming = dayName(3);
    const [row] = (
      await tdb.pool.query(
        `insert into outbox (topic, payload, created_at, available_at) values ('test.t', '{}', now() + interval '3 days', now()) returning id::int`,
      )
    ).rows;
    await detachDay(tdb.pool, coming);
    await tdb.pool.query(`alter table ${coming} drop constraint ${coming}_pkey`); // however it was left

    const migrated = await runInProcess(migrateCommand, [], env());
    expect(migrated, migrated.stderr).toMatchObject({ code: 0 });
    expect(await tableState(tdb.pool, coming)).toBe('partition');
    await housekeepOnce(tdb.db, { retentionDays: 7 });
    expect((await tdb.pool.query(`select tableoid::regclass::text as day from outbox where id = $1`, [row.id])).rows).toEqual([
      { day: coming },
    ]);
    const { rows: keys } = await tdb.pool.query(`select contype::text from pg_constraint where conrelid = $1::regclass order by 1`, [
      coming,
    ]);
    // Its primary key back; no unique public_id, as no day made since public ids are derived has one (ADR 0051).
    expect(keys.map((k) => k.contype).filter((t) => t !== 'c' && t !== 'n')).toEqual(['p']);
  });

  it('a table that cannot be a day of the outbox: migrate refuses with one line that names it and the fix', async () => {
    const coming = dayName(3);
    await detachDay(tdb.pool, coming);
    await tdb.pool.query(`drop table ${coming}`);
    await tdb.pool.query(`create table ${coming} (note text)`);

    const migrated = await runInProcess(migrateCommand, [], env());

    expect(migrated.code).toBe(1);
    const lines = migrated.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`the table ${coming} that has its name cannot be attached as it`);
    expect(lines[0]).toContain(`rename it (ALTER TABLE ${coming} RENAME TO ${coming}_leftover) or drop it, then start again`);
    expect((await tdb.pool.query(`select count(*)::int as n from ${coming}`)).rows[0].n).toBe(0); // untouched

    await tdb.pool.query(`alter table ${coming} rename to ${coming}_leftover`); // the fix it names
    expect(await runInProcess(migrateCommand, [], env())).toMatchObject({ code: 0 });
    expect(await tableState(tdb.pool, coming)).toBe('partition');
    await tdb.pool.query(`drop table ${coming}_leftover`);
  });
});
