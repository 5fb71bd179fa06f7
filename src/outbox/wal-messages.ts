import pg from 'pg';
import type { Db } from '../db/client.ts';
import { executorOf, run, statement, type Executor } from './executor.ts';

/*
 * Messages written to the WAL, made into rows by the worker (ADR 0056, OUTBOX_WRITES=wal).
 *
 * The row is most of what the outbox costs the writer's transaction: a heap tuple, its index
 * entries and its turn's probes, written while the business write waits. On this path enqueue writes the message
 * with pg_logical_emit_message(true, …) instead: a WAL record in the caller's transaction, gone
 * with a rollback and there after a commit, as the row was. A logical replication slot hands the
 * messages back in commit order, and the worker's outbox_materialize
 * (src/outbox/migrations/0005_messages_from_the_wal.sql) inserts the same rows enqueue would have, in
 * batches, off the request's path. From the row on nothing changes.
 *
 * What it asks of the server: `wal_level = logical` (a restart), the slot (made by the worker's and
 * `npm run migrate`'s start, never by a writer), and a role allowed to read it (REPLICATION, or the
 * owner of a managed service's flag). What it asks of the operator: while no worker reads the slot,
 * the messages wait in `pg_wal`, not in a table; `npm run outbox-stats` shows how far behind the
 * slot is. docs/operating.md says what to watch.
 */

/** The prefix every message carries: the slot's reader skips any other. */
export const WAL_MESSAGE_PREFIX = 'stayhub.outbox';

/** A publication of no table: pgoutput then gives back only the messages (and their transactions). */
export const WAL_PUBLICATION = 'stayhub_outbox_messages';

export type OutboxWrites = 'table' | 'wal';

let writes: OutboxWrites = 'table';

/**
 * Where this process's enqueue writes: the table (the default), or the WAL. Set once at start by a
 * process whose writers are on a hot path (the API), after `requireWalSlot`.
 */
export function setOutboxWrites(to: OutboxWrites): void {
  writes = to;
}

export function outboxWrites(): OutboxWrites {
  return writes;
}

/**
 * The message's content as SQL: a JSON object of what its row will hold. `$first` … are the
 * caller's parameters in enqueue's order (topic, payload, key, priority, group, owner, then the
 * trace context when traced); `at` is the writer's now(), the row's created_at and available_at,
 * as on the table path. No id: the row's id, and the public id derived from it, are given when the
 * row is made.
 */
export function walMessageSql(first: number, traced: boolean): string {
  const p = (i: number) => `$${first + i}`;
  const trace = traced ? `, 'traceparent', ${p(6)}::text, 'tracestate', ${p(7)}::text` : '';
  // The commit is flushed before it returns, whatever the session's setting: the slot is read only
  // up to the flushed WAL, so an unflushed commit would wait for the WAL writer to reach the worker.
  return `set_config('synchronous_commit', 'on', true) is not null and pg_logical_emit_message(true, '${WAL_MESSAGE_PREFIX}', json_build_object(
            'topic', ${p(0)}::text, 'payload', ${p(1)}::json, 'key', ${p(2)}::text,
            'priority', ${p(3)}::int, 'group', ${p(4)}::text, 'owner', ${p(5)}::text, 'at', now()${trace})::text) is not null`;
}

const MATERIALIZE = statement(
  'outbox-materialize',
  `select next_move_to::text as move_to, made from outbox_materialize($1::name, $2::text, $3::pg_lsn, $4::int)`,
);

export interface Materialized {
  /** Where the next call may move the slot to: rows committed up to there, or WAL that held no message. */
  moveTo: string | null;
  /** Rows made by this call. */
  made: number;
}

/**
 * Makes rows of the messages committed since the slot's position, in one statement and one
 * transaction; `moveTo` is what the previous call returned (null at first: the slot is read from
 * where it stands, and what is already rows is skipped by the position recorded with them).
 */
export async function materialize(q: Executor, slot: string, moveTo: string | null, maxChanges = 10_000): Promise<Materialized> {
  const [row] = await run<{ move_to: string | null; made: number }>(q, MATERIALIZE, [slot, WAL_PUBLICATION, moveTo, maxChanges]);
  return { moveTo: row!.move_to, made: row!.made };
}

/**
 * Makes the publication and the slot if they are missing. Run by the worker and by `npm run
 * migrate` when OUTBOX_WRITES=wal, before any writer may write to the WAL: a message written before
 * its slot exists is read by nobody.
 */
export async function ensureWalSlot(connectionString: string, slot: string): Promise<{ made: boolean }> {
  const c = new pg.Client({ connectionString, application_name: 'stayhub-outbox-slot' });
  await c.connect();
  try {
    const level = (await c.query<{ wal_level: string }>('show wal_level')).rows[0]!.wal_level;
    if (level !== 'logical') {
      throw new Error(
        `OUTBOX_WRITES=wal needs the server's wal_level to be logical (it is ${level}): set it in postgresql.conf (or the service's flag) and restart the server, or set OUTBOX_WRITES=table`,
      );
    }
    await c.query(`select pg_advisory_lock(727057)`);
    try {
      const pub = await c.query('select 1 from pg_publication where pubname = $1', [WAL_PUBLICATION]);
      if (pub.rowCount === 0) await c.query(`create publication ${WAL_PUBLICATION}`);
      const found = await c.query<{ database: string }>('select database from pg_replication_slots where slot_name = $1', [slot]);
      if (found.rows[0]) {
        const here = (await c.query<{ db: string }>('select current_database() as db')).rows[0]!.db;
        if (found.rows[0].database !== here) {
          throw new Error(
            `OUTBOX_SLOT ${slot} is the slot of the database ${found.rows[0].database}, not of ${here}: give each database its own`,
          );
        }
        return { made: false };
      }
      // A failover slot (PostgreSQL 17 and later): a standby with sync_replication_slots keeps a
      // copy, so a promoted standby still has the messages not yet read (docs/operating.md).
      const version = Number((await c.query<{ v: string }>(`select current_setting('server_version_num') as v`)).rows[0]!.v);
      await c.query(
        version >= 170000
          ? `select pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`
          : `select pg_create_logical_replication_slot($1, 'pgoutput')`,
        [slot],
      );
      return { made: true };
    } finally {
      await c.query(`select pg_advisory_unlock(727057)`).catch(() => undefined);
    }
  } finally {
    await c.end().catch(() => undefined);
  }
}

const SLOT = statement(
  'outbox-wal-slot',
  `select s.database = current_database() as here,
          pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::float8 as behind_bytes,
          s.wal_status
     from pg_replication_slots s where s.slot_name = $1`,
);

export interface WalSlotState {
  /** WAL written since the slot's reader last moved it: what waits in pg_wal for the worker. */
  behindBytes: number;
  /** PostgreSQL's word for whether the WAL it needs is still there (`lost`: messages are gone). */
  walStatus: string;
}

/** The slot's state; null when it does not exist in this database. */
export async function walSlotState(db: Db, slot: string): Promise<WalSlotState | null> {
  const [row] = await run<{ here: boolean; behind_bytes: number; wal_status: string }>(executorOf(db), SLOT, [slot]);
  if (!row?.here) return null;
  return { behindBytes: row.behind_bytes, walStatus: row.wal_status };
}

/**
 * Refuses to write to the WAL without a slot that reads it: the API's start with OUTBOX_WRITES=wal.
 * A message written while no slot exists would be lost without a trace.
 */
export async function requireWalSlot(db: Db, slot: string): Promise<void> {
  const state = await walSlotState(db, slot);
  if (!state) {
    throw new Error(
      `OUTBOX_WRITES=wal, but this database has no replication slot ${slot}: start the worker or run npm run migrate with the same settings first (they make it)`,
    );
  }
  if (state.walStatus === 'lost') {
    throw new Error(
      `the outbox's replication slot ${slot} has lost WAL it needed (max_slot_wal_keep_size): messages were lost; see docs/operating.md`,
    );
  }
}
