import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import { purgeDoneBatch } from '../../src/outbox/purge.ts';
import { housekeepOnce } from '../../src/outbox/runner/housekeeping.ts';
import type { BenchServer } from './lib/server.ts';
import { DONE_HISTORY_SQL } from './ours.ts';
import { median, msSince } from './lib/stats.ts';

/*
 * Where the cost grows: an outbox holding a long DONE history, the housekeeping purge that keeps
 * it short (src/outbox/purge.ts), what dropping a table of that size would cost instead (the
 * price of a time partition, which the outbox does not have), and a bookings table holding years
 * of stays. The large tables are built once as templates and cloned for every run, so each run
 * starts from the same rows and the slow inserts happen once.
 */

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url, application_name: 'bench-history' });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** OUTBOX_RETENTION_DAYS as the worker reads it (its default: nothing here sets it). */
const retentionDays = () =>
  loadConfig({ DATABASE_URL: 'postgres://unused/unused', MAIL_DIR: path.join(os.tmpdir(), 'stayhub-bench-mail') }).OUTBOX_RETENTION_DAYS;

/**
 * Clones a large template. FILE_COPY copies the template's files after a checkpoint; the default
 * (WAL_LOG) writes every block of it to WAL, 2–3 s for 400 MB here against 1 s, and on every run.
 */
export async function cloneDatabase(server: BenchServer, name: string, template: string): Promise<string> {
  await withClient(server.url('postgres'), (c) => c.query(`create database "${name}" template "${template}" strategy file_copy`));
  return server.url(name);
}

/** Clones of 400 MB add up over a run: each goes once measured. */
export async function dropDatabase(server: BenchServer, name: string): Promise<void> {
  await withClient(server.url('postgres'), (c) => c.query(`drop database if exists "${name}" with (force)`));
}

/**
 * `rows` DONE messages as the worker leaves them (one handler done, processed 30 days ago: past
 * OUTBOX_RETENTION_DAYS, so the purge takes every one), in one statement as ours.ts
 * prepareClaimTables writes them, then VACUUM ANALYZE as autovacuum would have left the table.
 */
export async function fillDoneHistory(url: string, rows: number): Promise<void> {
  await withClient(url, async (c) => {
    await c.query(DONE_HISTORY_SQL, [rows]);
    await c.query('vacuum analyze outbox');
  });
}

/** `count` PENDING no-op messages after the history (the claim's work), then VACUUM ANALYZE. */
export async function addPending(url: string, count: number): Promise<void> {
  await withClient(url, async (c) => {
    await c.query(
      `insert into outbox (topic, key, payload) select 'bench.noop', outbox_uuid_v7()::text, jsonb_build_object('i', i) from generate_series(1, $1::int) i`,
      [count],
    );
    await c.query('vacuum analyze outbox');
  });
}

/** The housekeeping's batch (src/outbox/runner/housekeeping.ts). */
const PURGE_BATCH = 1000;

type Sizes = { table: number; pendingIdx: number; keyIdx: number };

const sizes = async (c: pg.Client): Promise<Sizes> => {
  const { rows } = await c.query<{ table: string; pending_idx: string; key_idx: string }>(
    `select pg_total_relation_size('outbox') as table, pg_relation_size('outbox_pending_available_idx') as pending_idx,
            pg_relation_size('outbox_key_idx') as key_idx`,
  );
  return { table: Number(rows[0]!.table), pendingIdx: Number(rows[0]!.pending_idx), keyIdx: Number(rows[0]!.key_idx) };
};

/** The server's WAL position; two of them give the bytes written in between (by anyone: run this alone). */
const walLsn = async (c: pg.Client) => (await c.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0]!.lsn;
const walSince = async (c: pg.Client, from: string) =>
  Number((await c.query<{ b: string }>('select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn) as b', [from])).rows[0]!.b);

export type PurgeCost = {
  rows: number;
  seconds: number;
  /** Median time of the first ten and of the last ten full batches: how a batch's cost moves as the purge goes. */
  firstBatchesMs: number;
  lastBatchesMs: number;
  walBytes: number;
  vacuumSeconds: number;
  vacuumWalBytes: number;
  /** pg_total_relation_size('outbox'): heap, TOAST and every index. */
  tableBytesBefore: number;
  tableBytesAfter: number;
  tableBytesAfterVacuum: number;
  pendingIdxBytesBefore: number;
  pendingIdxBytesAfter: number;
  pendingIdxBytesAfterVacuum: number;
  keyIdxBytesBefore: number;
  keyIdxBytesAfter: number;
  keyIdxBytesAfterVacuum: number;
};

/**
 * The purge alone, as the worker's housekeeping runs it: src/outbox/purge.ts purgeDone's loop of
 * purgeDoneBatch, 1,000 rows a statement, each its own transaction, until a batch comes back short
 * (called batch by batch here to time each one); then a plain VACUUM (what
 * autovacuum does next; it gives pages back to the table, not to the disk). Nothing else runs on
 * the server meanwhile, so the WAL between the two positions is the purge's.
 */
export async function purgeCost(url: string): Promise<PurgeCost> {
  const database = createDatabase(url, { max: 1, applicationName: 'bench-purge' });
  try {
    return await withClient(url, async (c) => {
      const before = await sizes(c);
      const lsn = await walLsn(c);
      const days = retentionDays();
      const batches: number[] = [];
      let rows = 0;
      const t = process.hrtime.bigint();
      for (;;) {
        const tb = process.hrtime.bigint();
        const n = await purgeDoneBatch(database.db, days, PURGE_BATCH);
        if (n === PURGE_BATCH) batches.push(msSince(tb));
        rows += n;
        if (n < PURGE_BATCH) break;
      }
      const seconds = msSince(t) / 1000;
      const walBytes = await walSince(c, lsn);
      const after = await sizes(c);
      const vacuumLsn = await walLsn(c);
      const tv = process.hrtime.bigint();
      await c.query('vacuum outbox');
      const vacuumSeconds = msSince(tv) / 1000;
      const vacuumWalBytes = await walSince(c, vacuumLsn);
      const vacuumed = await sizes(c);
      return {
        rows,
        seconds,
        firstBatchesMs: median(batches.slice(0, 10)),
        lastBatchesMs: median(batches.slice(-10)),
        walBytes,
        vacuumSeconds,
        vacuumWalBytes,
        tableBytesBefore: before.table,
        tableBytesAfter: after.table,
        tableBytesAfterVacuum: vacuumed.table,
        pendingIdxBytesBefore: before.pendingIdx,
        pendingIdxBytesAfter: after.pendingIdx,
        pendingIdxBytesAfterVacuum: vacuumed.pendingIdx,
        keyIdxBytesBefore: before.keyIdx,
        keyIdxBytesAfter: after.keyIdx,
        keyIdxBytesAfterVacuum: vacuumed.keyIdx,
      };
    });
  } finally {
    await database.close();
  }
}

export type DropCost = { rows: number; tableBytes: number; dropMs: number; walBytes: number };

/**
 * Dropping a table of the outbox's shape holding the same DONE rows: what dropping a time
 * partition of that size would cost. Copied from the outbox (`like outbox including all`: the same
 * columns, defaults and indexes), then CHECKPOINTed, as a partition a week past its last write
 * would be; then DROP TABLE, timed, and its WAL.
 */
export async function dropTableCost(url: string): Promise<DropCost> {
  return withClient(url, async (c) => {
    await c.query('create table outbox_done_copy (like outbox including all)');
    const { rowCount } = await c.query(`insert into outbox_done_copy select * from outbox where status = 'DONE'`);
    await c.query('checkpoint');
    const tableBytes = Number((await c.query<{ b: string }>(`select pg_total_relation_size('outbox_done_copy') as b`)).rows[0]!.b);
    const lsn = await walLsn(c);
    const t = process.hrtime.bigint();
    await c.query('drop table outbox_done_copy');
    const dropMs = msSince(t);
    return { rows: rowCount ?? 0, tableBytes, dropMs, walBytes: await walSince(c, lsn) };
  });
}

/**
 * The worker's housekeeping round (src/outbox/runner/housekeeping.ts housekeepOnce: purgeDone
 * 1,000 rows a statement) running beside a measurement, stopped between two batches when the
 * measurement ends. `stop()` says how many rows went meanwhile and whether the purge was still
 * at work at the end (if not, part of the measurement ran without it).
 */
export function concurrentPurge(url: string) {
  const database = createDatabase(url, { max: 1, applicationName: 'bench-purge-beside' });
  let stopping = false;
  let finished = false;
  const round = housekeepOnce(database.db, { retentionDays: retentionDays(), stopping: () => stopping }).then((counts) => {
    finished = true;
    return counts.outbox;
  });
  return {
    async stop(): Promise<{ purged: number; ranThrough: boolean }> {
      const ranThrough = !finished;
      stopping = true;
      try {
        return { purged: await round, ranThrough };
      } finally {
        await database.close();
      }
    },
  };
}

/** Stays per history property: two nights every three days, going back 600 days. */
const STAYS_PER_PROPERTY = 200;

/**
 * `bookings` confirmed past stays, inserted in SQL before the API starts: ⌈bookings / 200⌉
 * properties of their own host, each with 200 two-night stays, one every three days going back
 * from yesterday (600 days). They never overlap one another (the exclusion constraint checks each
 * one) nor any stay the bench books: those are on other properties, and in the future. No outbox
 * rows with them: the outbox's own history is what the purge and growth sections measure.
 */
export async function fillBookingHistory(url: string, bookings: number): Promise<void> {
  const properties = Math.ceil(bookings / STAYS_PER_PROPERTY);
  await withClient(url, async (c) => {
    const { rows } = await c.query<{ id: string }>(
      `insert into users (email, name, role, password_hash)
       values ('history-host@example.test', 'History host', 'host', 'x'), ('history-guest@example.test', 'History guest', 'guest', 'x')
       returning id`,
    );
    const [host, guest] = rows.map((r) => r.id);
    await c.query(
      `insert into properties (host_id, title, city, country, nightly_price, cleaning_fee, max_guests)
       select $1::bigint, 'History flat ' || i, 'Lisbon', 'PT', 10000, 2500, 4 from generate_series(1, $2::int) i`,
      [host, properties],
    );
    await c.query(
      `insert into bookings (property_id, guest_id, check_in, check_out, guests, currency, nights, nightly_price, subtotal, cleaning_fee, service_fee, total,
                             created_at, updated_at)
       select p.id, $1::bigint, current_date - 3 * (j + 1), current_date - 3 * (j + 1) + 2, 2, 'EUR', 2, 10000, 20000, 2500, 2700, 25200,
              now() - (3 * (j + 1) + 30) * interval '1 day', now() - (3 * (j + 1) + 30) * interval '1 day'
         from (select id, row_number() over (order by id) - 1 as n from properties where host_id = $2::bigint) p
        cross join generate_series(0, ${STAYS_PER_PROPERTY - 1}) j
        where p.n * ${STAYS_PER_PROPERTY} + j < $3::int`,
      [guest, host, bookings],
    );
    await c.query('vacuum analyze');
  });
}
