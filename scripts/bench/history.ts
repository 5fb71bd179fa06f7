import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import {
  analyzeOutbox,
  countPending,
  dayOf,
  dropOutboxPartition,
  fillBacklog,
  fillDoneHistory as insertDoneHistory,
  listOutboxPartitions,
  outboxSizes,
  purgeDoneBatch,
} from './lib/outbox.ts';
import { median, msSince } from './lib/stats.ts';
import { walLsn, walSince } from './lib/wal.ts';
import { withClient as withPgClient } from '../lib/postgres.ts';

/*
 * Where the cost grows: an outbox holding a long DONE history, the two ways it goes (the
 * housekeeping drops a day's partition whole, src/outbox/partitions.ts; a day that cannot go whole
 * is deleted row by row, src/outbox/purge.ts), and a bookings table holding years of stays. The
 * large tables are built once as templates and cloned for every run, so each run starts from the
 * same rows and the slow inserts happen once.
 *
 * The history is one day of its own: the outbox is partitioned by day of created_at, and the
 * first partition of a fresh database holds everything before tomorrow, so a history written in
 * the past would share it with the live rows and never expire. It is written in the day partition
 * HISTORY_DAYS_AHEAD days ahead instead (made by outbox_ensure_partitions, like every day ahead),
 * and each purge runs with its clock (`now`) set to when the retention has passed over that day
 * (expiredAt). The live rows (PENDING rows for the claims, the drain's messages) are written now,
 * into today's partition, and stay there.
 */

const DAY_MS = 24 * 3600 * 1000;

/**
 * Three days ahead, not tomorrow: a run that crosses midnight (UTC) writes its live rows into the
 * next day's partition, which must not be the history's.
 */
const HISTORY_DAYS_AHEAD = 3;

/**
 * A build of millions of rows is bound by one backend's CPU: two statements at once build 1,000,000
 * rows in 16–20 s instead of 30 here (2 cores), 5,000,000 in 70–125 s.
 */
const BUILD_LANES = 2;

/** A connection of its own, named in pg_stat_activity as the history builder's. */
const withClient = <T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> => withPgClient(url, fn, 'bench-history');

/** OUTBOX_RETENTION_DAYS as the worker reads it (its default: nothing here sets it). */
const retentionDays = () =>
  loadConfig({ DATABASE_URL: 'postgres://unused/unused', MAIL_DIR: path.join(os.tmpdir(), 'stayhub-bench-mail') }).OUTBOX_RETENTION_DAYS;

/** A DONE history: the day partition that holds it, and how many rows. */
export interface HistoryDay {
  /** outbox_YYYYMMDD */
  partition: string;
  /** The start of its day (UTC). */
  day: Date;
  rows: number;
}

/**
 * The clock at which the retention has passed over the history's day: its end plus
 * OUTBOX_RETENTION_DAYS. Both purges run at it; the DELETE's `created_at < start of the cutoff's
 * day` then takes the history's rows, and the PENDING rows are never touched.
 */
const expiredAt = (h: HistoryDay) => new Date(h.day.getTime() + (1 + retentionDays()) * DAY_MS);

/**
 * `rows` DONE messages as the worker leaves them (one handler done), created 1 ms apart from the
 * start of the day HISTORY_DAYS_AHEAD ahead, in that day's partition and nowhere else, in
 * BUILD_LANES statements on as many connections at once; then VACUUM ANALYZE as autovacuum would
 * have left the table. Processed 30 days ago, before anything a measurement settles: the DELETE
 * (purgeDoneBatch, oldest id first) beside a drain deletes the history, not the
 * messages the drain has just finished, which at its clock are past the retention too.
 */
export async function fillDoneHistory(url: string, rows: number): Promise<HistoryDay> {
  const lanes = BUILD_LANES;
  const day = new Date(dayOf(new Date()).getTime() + HISTORY_DAYS_AHEAD * DAY_MS);
  if (rows >= DAY_MS) throw new Error(`a day holds ${DAY_MS} rows 1 ms apart, not ${rows}`);
  const partition = await withClient(url, async (c) => {
    const p = (await listOutboxPartitions(c)).find((x) => x.from?.getTime() === day.getTime());
    if (!p) throw new Error(`no outbox partition for ${day.toISOString()}: outbox_ensure_partitions makes a week ahead`);
    return p.name;
  });
  // Lane k's rows start where lane k-1's end: one run of created_at, 1 ms apart, inside the day.
  const per = Math.ceil(rows / lanes);
  const monthAgo = new Date(Date.now() - 30 * DAY_MS);
  const inserted = await Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      const n = Math.min(per, rows - lane * per);
      if (n <= 0) return 0;
      const created = new Date(day.getTime() + lane * per);
      const processed = new Date(monthAgo.getTime() + lane * per);
      return withClient(url, (c) => insertDoneHistory(c, n, created, processed));
    }),
  );
  if (inserted.reduce((a, b) => a + b, 0) !== rows) throw new Error(`inserted ${inserted.join(' + ')} rows, not ${rows}`);
  await withClient(url, (c) => analyzeOutbox(c, { vacuum: true }));
  return { partition, day, rows };
}

/** `count` PENDING no-op messages, written now into today's partition (the claim's work), then VACUUM ANALYZE. */
export async function addPending(url: string, count: number): Promise<void> {
  await withClient(url, async (c) => {
    await fillBacklog(c, 'bench.noop', count);
    await analyzeOutbox(c, { vacuum: true });
  });
}

/** The housekeeping's batch (src/outbox/runner/housekeeping.ts). */
const PURGE_BATCH = 1000;

/**
 * The outbox's sizes at a moment (`When`: Before, After …) as the results name them: the table
 * (pg_total_relation_size summed over the outbox's partitions: heap, TOAST and every index) and
 * the two indexes a purge shrinks.
 */
type SizesAt<When extends string> = Record<`${'table' | 'pendingIdx' | 'keyIdx'}Bytes${When}`, number>;

const sizesAt = <When extends string>(s: Awaited<ReturnType<typeof outboxSizes>>, when: When) =>
  ({ [`tableBytes${when}`]: s.table, [`pendingIdxBytes${when}`]: s.pendingIdx, [`keyIdxBytes${when}`]: s.keyIdx }) as SizesAt<When>;

export type PurgeCost = Awaited<ReturnType<typeof purgeCost>>;

/**
 * The history deleted row by row, the path of a day that cannot go whole (and what the purge
 * was before the outbox had partitions): src/outbox/purge.ts purgeDone's loop of purgeDoneBatch,
 * 1,000 rows a statement, each its own transaction, until a batch comes back short (called batch
 * by batch here to time each one), at the clock where the history's day has expired; then a plain
 * VACUUM (what autovacuum does next; it gives pages back to the table, not to the disk). Nothing
 * else runs on the server meanwhile, so the WAL between the two positions is the purge's. Checked
 * after: the history's partition is empty and every PENDING row is still there.
 */
export async function purgeCost(url: string, history: HistoryDay) {
  const database = createDatabase(url, { max: 1, applicationName: 'bench-purge' });
  try {
    return await withClient(url, async (c) => {
      const pending = await countPending(c);
      const before = await outboxSizes(c);
      const lsn = await walLsn(c);
      const days = retentionDays();
      const now = expiredAt(history);
      const batches: number[] = [];
      let rows = 0;
      const t = process.hrtime.bigint();
      for (;;) {
        const tb = process.hrtime.bigint();
        const n = await purgeDoneBatch(database.db, days, PURGE_BATCH, now);
        if (n === PURGE_BATCH) batches.push(msSince(tb));
        rows += n;
        if (n < PURGE_BATCH) break;
      }
      const seconds = msSince(t) / 1000;
      const walBytes = await walSince(c, lsn);
      const after = await outboxSizes(c);
      const vacuumLsn = await walLsn(c);
      const tv = process.hrtime.bigint();
      await analyzeOutbox(c, { vacuum: true, analyze: false });
      const vacuumSeconds = msSince(tv) / 1000;
      const vacuumWalBytes = await walSince(c, vacuumLsn);
      const vacuumed = await outboxSizes(c);
      const left = Number((await c.query<{ n: string }>(`select count(*) as n from ${history.partition}`)).rows[0]!.n);
      if (rows !== history.rows || left !== 0) throw new Error(`the DELETE took ${rows} rows of ${history.rows}, left ${left}`);
      if ((await countPending(c)) !== pending) throw new Error('the DELETE touched PENDING rows');
      return {
        rows,
        seconds,
        // The first ten full batches and the last ten, medians: how a batch's cost moves as the purge goes.
        firstBatchesMs: median(batches.slice(0, 10)),
        lastBatchesMs: median(batches.slice(-10)),
        walBytes,
        vacuumSeconds,
        vacuumWalBytes,
        ...sizesAt(before, 'Before'),
        ...sizesAt(after, 'After'),
        ...sizesAt(vacuumed, 'AfterVacuum'),
      };
    });
  } finally {
    await database.close();
  }
}

export type DropCost = Awaited<ReturnType<typeof dropPartitionCost>>;

/** A pool whose queries are each timed, in order: where a product function's time goes, statement by statement. */
function timedPool(pool: pg.Pool, ms: number[]): pg.Pool {
  const query = (...args: unknown[]) => {
    const t = process.hrtime.bigint();
    return (pool.query as (...a: unknown[]) => Promise<unknown>).apply(pool, args).finally(() => ms.push(msSince(t)));
  };
  return new Proxy(pool, { get: (target, key): unknown => (key === 'query' ? query : Reflect.get(target, key)) });
}

/**
 * The history's partition dropped as the housekeeping drops an expired day: src/outbox/partitions.ts
 * dropOutboxPartition (its rows from the statistics, DETACH … CONCURRENTLY, DROP TABLE), timed, with its
 * WAL. CHECKPOINTed first, as a day a week past its last write would be. Checked after: every row
 * of the history went, and every PENDING row is still there.
 */
export async function dropPartitionCost(url: string, history: HistoryDay) {
  const database = createDatabase(url, { max: 1, applicationName: 'bench-drop' });
  try {
    return await withClient(url, async (c) => {
      const pending = await countPending(c);
      const partitionBytes = Number(
        (await c.query<{ b: string }>('select pg_total_relation_size($1::regclass) as b', [history.partition])).rows[0]!.b,
      );
      const before = await outboxSizes(c);
      await c.query('checkpoint');
      const lsn = await walLsn(c);
      const statements: number[] = [];
      const t = process.hrtime.bigint();
      const dropped = await dropOutboxPartition(timedPool(database.pool, statements), { name: history.partition, detachPending: false });
      const ms = msSince(t);
      const walBytes = await walSince(c, lsn);
      const after = await outboxSizes(c);
      if (statements.length !== 3) throw new Error(`dropOutboxPartition ran ${statements.length} statements, the bench names 3`);
      const gone = (await c.query<{ t: string | null }>('select to_regclass($1)::text as t', [history.partition])).rows[0]!.t === null;
      if (!gone || dropped.name !== history.partition) throw new Error(`the DROP left ${history.partition} in place`);
      if ((await countPending(c)) !== pending) throw new Error('the DROP touched PENDING rows');
      const [statsMs, detachMs, dropMs] = statements as [number, number, number];
      return {
        rows: history.rows,
        // The partition's own size, table and indexes, before.
        partitionBytes,
        // dropOutboxPartition, whole; then its three statements: its rows read from the statistics
        // (reltuples), DETACH … CONCURRENTLY, DROP TABLE.
        ms,
        statsMs,
        detachMs,
        dropMs,
        walBytes,
        tableBytesBefore: before.table,
        ...sizesAt(after, 'After'),
      };
    });
  } finally {
    await database.close();
  }
}

/** The two ways a day's DONE rows go. */
export type PurgeWay = 'delete' | 'drop';

/** What a purge did beside a measurement. */
export type Beside = {
  /** Rows it removed meanwhile (for the DROP: the partition's, counted by dropOutboxPartition). */
  purged: number;
  /** From its start to its end (for a DELETE stopped with the measurement: to the batch in flight then). */
  purgeMs: number;
  /** From its start to the measurement's end. */
  measuredMs: number;
  /** 1: it was still at work when the measurement ended; 0: part of the measurement ran without it. */
  ranThrough: number;
};

/** Rows in the history's day now: counted outside any measurement. */
export async function rowsInDay(url: string, history: HistoryDay): Promise<number> {
  return withClient(url, async (c) => Number((await c.query<{ n: string }>(`select count(*) as n from ${history.partition}`)).rows[0]!.n));
}

/**
 * A purge of the history beside a measurement, on its own connection, at the clock where the
 * history's day has expired:
 *
 * - 'drop': the housekeeping's drop of the expired day (dropOutboxPartition, as
 *   dropExpiredOutboxPartitions calls it once it has found the day all DONE). Not the whole of
 *   purgeOutbox: at that clock today's partition is past the retention too, so its DONE rows (the
 *   drain's, as it settles them) would be deleted by the straggler loop, and once the drain is over
 *   the partition itself would be dropped; neither happens at a real clock, where today is never
 *   expired. It cannot be stopped halfway; `stop()` waits for it.
 * - 'delete': purgeDoneBatch, 1,000 rows a statement, until the history is gone or the
 *   measurement ends (stopped between two batches): the purge before partitions.
 */
export function concurrentPurge(url: string, history: HistoryDay, way: PurgeWay, rowsInDay = history.rows) {
  const database = createDatabase(url, { max: 1, applicationName: 'bench-purge-beside' });
  const now = expiredAt(history);
  const days = retentionDays();
  let stopping = false;
  let purgeMs: number | undefined;
  const t = process.hrtime.bigint();
  const work = async () => {
    // The rows it took: counted before the measurement (dropOutboxPartition's own figure is the
    // statistics', which a DELETE earlier in the same clone left stale).
    if (way === 'drop') return (await dropOutboxPartition(database.pool, { name: history.partition, detachPending: false }), rowsInDay);
    // Never past the history: at this clock the drain's DONE messages are past the retention too.
    let rows = 0;
    while (!stopping && rows < history.rows) {
      const batch = Math.min(PURGE_BATCH, history.rows - rows);
      const n = await purgeDoneBatch(database.db, days, batch, now);
      rows += n;
      if (n < batch) break;
    }
    return rows;
  };
  const round = work().finally(() => {
    purgeMs = msSince(t);
  });
  // Awaited by stop(); this keeps a failure from being unhandled until then.
  round.catch(() => undefined);
  return {
    async stop(): Promise<Beside> {
      const measuredMs = msSince(t);
      const ranThrough = purgeMs === undefined ? 1 : 0;
      stopping = true;
      try {
        const purged = await round;
        return { purged, purgeMs: purgeMs!, measuredMs, ranThrough };
      } finally {
        await database.close();
      }
    },
  };
}
