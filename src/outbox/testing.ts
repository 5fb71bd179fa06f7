import { sql } from 'drizzle-orm';
import type pg from 'pg';
import type { Db } from '../db/client.ts';
import type { Queryable } from '../db/prepared.ts';
import { ensureOutboxPartitions, listOutboxPartitions } from './partitions.ts';

/*
 * The outbox's second door, for its tests, the bench and the chaos run: they write rows the product
 * never writes (any topic, a backlog of N messages in one statement, a DONE history), read rows as
 * the worker left them, and measure statements behind src/outbox/index.ts (the claim, the DONE
 * write, the purge's batch, a partition's drop). Everything here is SQL the outbox owns, so nothing
 * outside src/outbox/ names its tables or functions (test/unit/outbox/sql-stays-inside.test.ts).
 * Never imported by the API or the worker.
 *
 * Each insert writes what `enqueue` would (one row a message, a time-ordered unique key from
 * outbox_uuid_v7, ADR 0018, priority/group/turn when asked), but many at once, in one statement:
 * the bench fills its backlogs before a clock starts, and a bulk insert must stay one.
 */

// Statements the bench measures, or measures against, as the worker and the housekeeping run them.
export { claimOn, ClaimedMessage } from './claim.ts';
export { connectClaimClient, explainClaim } from './claim-connection.ts';
export { markDoneMany } from './settle.ts';
export { dayOf, dropOutboxPartition, listOutboxPartitions } from './partitions.ts';
export { purgeDoneBatch } from './purge.ts';

// The outbox's tables as drizzle declares them (the schema-drift check compares a database with them).
export { outbox, outboxAudit, outboxMigrationRecords } from './schema.ts';
export { outboxMigrations } from './migrate.ts';

// ---------------------------------------------------------------------------------------------
// Tests: messages written straight into the table, read back as the worker left them.

/** A message row as the worker left it (tests' view: every column a test asserts on). */
export type MessageRow = {
  id: number;
  public_id: string;
  topic: string;
  key: string | null;
  status: 'PENDING' | 'DONE' | 'DEAD';
  attempts: number;
  handlers_done: string[];
  claim_id: string | null;
  last_error: string | null;
  processed_at: Date | null;
  /** Seconds from now until it may be claimed: available_at, or a lease's end (negative when due). */
  due_in: number;
  /** available_at − claimed_at in seconds: the delay a settle scheduled, counted from the claim. */
  scheduled_after_claim: number | null;
};

/**
 * Writes messages straight into the table (any topic, even one no handler or schema knows), as
 * `enqueue` would but outside a producer: the worker is what is under test. 1,000 rows a
 * statement, in the order given (unnest … with ordinality keeps it, so ids follow the list).
 */
export async function insertMessages(db: Db, messages: { topic: string; payload?: unknown; key?: string | null }[]): Promise<MessageRow[]> {
  const ids: number[] = [];
  for (let i = 0; i < messages.length; i += 1000) {
    const chunk = messages.slice(i, i + 1000);
    const { rows } = await db.execute<{ id: string }>(sql`
      insert into outbox (topic, key, payload)
      select t, k, p::jsonb
        from unnest(${sql.param(chunk.map((m) => m.topic))}::text[],
                    ${sql.param(chunk.map((m) => m.key ?? null))}::text[],
                    ${sql.param(chunk.map((m) => JSON.stringify(m.payload ?? {})))}::text[])
             with ordinality as x(t, k, p, n)
       order by n
      returning id`);
    ids.push(...rows.map((r) => Number(r.id)));
  }
  return ids.length ? getMessages(db, ids) : [];
}

/** The rows behind `ids` (internal ids), in id order. */
export async function getMessages(db: Db, ids: number[]): Promise<MessageRow[]> {
  const { rows } = await db.execute<MessageRow>(sql`
    select id::int as id, public_id, topic, key, status, attempts, handlers_done, claim_id, last_error, processed_at,
           extract(epoch from greatest(available_at, leased_until) - now())::float8 as due_in,
           extract(epoch from available_at - claimed_at)::float8 as scheduled_after_claim
      from outbox where id = any(${sql.param(ids)}::bigint[]) order by id`);
  return rows;
}

/** Time travel: makes PENDING messages (all, or the given ones) due now, as if their wait (backoff or lease) were over. */
export async function makeDue(db: Db, ids?: number[]): Promise<void> {
  await db.execute(
    ids
      ? sql`update outbox set available_at = now(), leased_until = null where status = 'PENDING' and id = any(${sql.param(ids)}::bigint[])`
      : sql`update outbox set available_at = now(), leased_until = null where status = 'PENDING'`,
  );
}

/**
 * The backoff a settle scheduled, bracketed without wall-clock slack: the settle ran after the
 * claim and before `settledBy` (a database clock read once the run was over), so the delay it
 * added to its own now() lies within [available_at − settledBy, available_at − claimed_at] seconds.
 */
export async function scheduledDelays(db: Db, ids: number[], settledBy: string): Promise<{ id: number; min: number; max: number }[]> {
  const { rows } = await db.execute<{ id: number; min: number; max: number }>(sql`
    select id::int as id,
           extract(epoch from available_at - ${settledBy}::timestamptz)::float8 as min,
           extract(epoch from available_at - claimed_at)::float8 as max
      from outbox where id = any(${sql.param(ids)}::bigint[]) order by id`);
  return rows;
}

/** Every row of the outbox, lane messages included. */
export async function countMessages(q: Queryable): Promise<number> {
  const { rows } = await q.query<{ n: number }>('select count(*)::int as n from outbox');
  return rows[0]!.n;
}

/**
 * Lays an EMPTY outbox out as a database that has run for a while: one partition for everything
 * before `daysBack` days ago, then a partition per day up to a week ahead, so tests can write rows
 * whose day has ended and see it dropped. (A fresh database's first partition holds everything
 * before tomorrow: nothing in it expires during a test.)
 */
export async function layOutPastDays(pool: pg.Pool, daysBack: number): Promise<void> {
  if ((await countMessages(pool)) !== 0) throw new Error('layOutPastDays: the outbox must be empty');
  for (const p of await listOutboxPartitions(pool)) {
    await pool.query(`alter table outbox detach partition ${p.name}`);
    await pool.query(`drop table ${p.name}`);
  }
  const first = new Date(Math.floor(Date.now() / 86_400_000 - daysBack) * 86_400_000);
  await pool.query('create table outbox_before (like outbox including defaults including constraints)');
  await pool.query('alter table outbox_before add primary key (id), add unique (public_id)');
  await pool.query(`alter table outbox attach partition outbox_before for values from (minvalue) to ('${first.toISOString()}')`);
  await ensureOutboxPartitions(pool);
}

/** Where a table named `name` stands: no such table, a table alone, or a partition of the outbox. */
export async function tableState(pool: pg.Pool, name: string): Promise<'absent' | 'alone' | 'partition'> {
  const { rows } = await pool.query<{ partition: boolean }>(
    `select exists (select 1 from pg_inherits where inhrelid = c.oid and inhparent = 'outbox'::regclass) as partition
       from pg_class c where c.relname = $1 and c.relnamespace = 'public'::regnamespace`,
    [name],
  );
  if (!rows.length) return 'absent';
  return rows[0]!.partition ? 'partition' : 'alone';
}

/** A crash between a drop's two statements, or a person: the day's partition detached and left as a table. */
export async function detachDay(pool: pg.Pool, name: string): Promise<void> {
  await pool.query(`alter table outbox detach partition ${name}`);
}

// ---------------------------------------------------------------------------------------------
// The bench and the chaos run: backlogs in one statement, sizes, counts.

/** Our end of a run: nothing PENDING (the bench's settle watch polls it for every system's clock). */
export const PENDING_PROBE_SQL = `select 1 from outbox where status = 'PENDING'`;

/** Whether this database holds our outbox (a bench peer's does not). */
export async function outboxExists(c: Queryable): Promise<boolean> {
  const { rows } = await c.query<{ ours: boolean }>(`select to_regclass('outbox') is not null as ours`);
  return rows[0]?.ours ?? false;
}

/** `count` messages of `topic`, payload `{ i }`, in one statement (a backlog, or the claim's PENDING rows). */
export async function fillBacklog(c: Queryable, topic: string, count: number): Promise<void> {
  await c.query(
    `insert into outbox (topic, key, payload)
     select $1, outbox_uuid_v7()::text, jsonb_build_object('i', i) from generate_series(1, $2::int) i`,
    [topic, count],
  );
}

/** The latency section's warm-up: `count` messages of `topic`, payload `{ id: -i }` (no sample's id), and their wake-up. */
export async function fillWarmUp(c: Queryable, topic: string, count: number): Promise<void> {
  await c.query(
    `insert into outbox (topic, key, payload) select $1, outbox_uuid_v7()::text, jsonb_build_object('id', -i) from generate_series(1, $2::int) i`,
    [topic, count],
  );
  await wakeUp(c, topic);
}

/** One message `{ id }`; with `wakeUp`, its pg_notify in the same statement, delivered by the COMMIT (what enqueue does alone). */
export async function insertOne(c: Queryable, topic: string, id: number, opts: { wakeUp: boolean }): Promise<void> {
  await c.query(
    opts.wakeUp
      ? `with ins as (insert into outbox (topic, key, payload) values ($1, outbox_uuid_v7()::text, jsonb_build_object('id', $2::int)) returning topic)
         select pg_notify('outbox', topic) from ins`
      : `insert into outbox (topic, key, payload) values ($1, outbox_uuid_v7()::text, jsonb_build_object('id', $2::int))`,
    [topic, id],
  );
}

/** Messages with the given payloads and keys `<prefix><offset + n>` (n from 1), in one statement. */
export async function insertPayloads(c: Queryable, topic: string, payloads: string[], keyPrefix: string, offset: number): Promise<void> {
  await c.query(
    `insert into outbox (topic, key, payload)
     select $3, $4::text || (n + $2), p::jsonb from unnest($1::text[]) with ordinality as x(p, n)`,
    [payloads, offset, topic, keyPrefix],
  );
}

/** The worker's wake-up for `topic`, as a producer sends it after its COMMIT. */
export async function wakeUp(c: Queryable, topic: string): Promise<void> {
  await c.query(`select pg_notify('outbox', $1)`, [topic]);
}

/** Messages PENDING. */
export async function countPending(c: Queryable): Promise<number> {
  return Number((await c.query<{ n: string }>(`select count(*) as n from outbox where status = 'PENDING'`)).rows[0]!.n);
}

/** Messages not DONE (PENDING, or DEAD): a drain that left any is broken, not slow. */
export async function countNotDone(c: Queryable): Promise<number> {
  return (await c.query<{ n: number }>(`select count(*)::int as n from outbox where status <> 'DONE'`)).rows[0]!.n;
}

/** Per status: messages, leased now, claimed (the picture of a burst). */
export async function statusCounts(c: Queryable): Promise<{ status: string; n: number; leased: number; claimed: number }[]> {
  const { rows } = await c.query<{ status: string; n: number; leased: number; claimed: number }>(
    `select status, count(*)::int n, count(*) filter (where leased_until > now())::int leased, count(*) filter (where claim_id is not null)::int claimed from outbox group by status`,
  );
  return rows;
}

/** Truncates the outbox (a run that starts from nothing). */
export async function emptyOutbox(c: Queryable): Promise<void> {
  await c.query('truncate outbox');
}

/**
 * VACUUM ANALYZE, or ANALYZE alone: the statistics autovacuum would have after a table grew this
 * way; `analyze: false`, a plain VACUUM (what autovacuum does after a DELETE, timed by the purge).
 */
export async function analyzeOutbox(c: Queryable, opts: { vacuum: boolean; analyze?: boolean }): Promise<void> {
  const analyze = opts.analyze ?? true;
  await c.query(opts.vacuum ? (analyze ? 'vacuum analyze outbox' : 'vacuum outbox') : 'analyze outbox');
}

export type Sizes = { table: number; pendingIdx: number; keyIdx: number };

/**
 * The outbox's sizes. The partitioned parent and its partitioned indexes hold no data of their
 * own (their size is 0): each is the sum over its leaves, the partitions and their indexes.
 */
export const outboxSizes = async (c: Queryable): Promise<Sizes> => {
  const { rows } = await c.query<{ table: string; pending_idx: string; key_idx: string }>(
    `select (select coalesce(sum(pg_total_relation_size(relid)), 0) from pg_partition_tree('outbox') where isleaf) as table,
            (select coalesce(sum(pg_relation_size(relid)), 0) from pg_partition_tree('outbox_pending_available_idx') where isleaf) as pending_idx,
            (select coalesce(sum(pg_relation_size(relid)), 0) from pg_partition_tree('outbox_key_idx') where isleaf) as key_idx`,
  );
  return { table: Number(rows[0]!.table), pendingIdx: Number(rows[0]!.pending_idx), keyIdx: Number(rows[0]!.key_idx) };
};

/**
 * How many index entries the newest message wrote, and how many indexes its partition has. The
 * indexes are partial (src/outbox/schema.ts), so a row enters only those whose predicate it
 * meets: each predicate is evaluated on the row itself, which must still be as it was written
 * (nothing has claimed it). Null on an empty outbox.
 */
export async function newestRowIndexEntries(c: Queryable): Promise<{ entries: number; indexes: number } | null> {
  const newest = await c.query<{ id: string; part: string }>(
    `select id, tableoid::regclass::text as part from outbox order by id desc limit 1`,
  );
  const row = newest.rows[0];
  if (!row) return null;
  const { rows: preds } = await c.query<{ pred: string | null }>(
    `select pg_get_expr(indpred, indrelid) as pred from pg_index where indrelid = $1::regclass`,
    [row.part],
  );
  const terms = preds.map((p) => (p.pred === null ? '1' : `(case when ${p.pred} then 1 else 0 end)`));
  const { rows } = await c.query<{ n: number }>(`select (${terms.join(' + ')})::int as n from ${row.part} where id = $1`, [row.id]);
  return { entries: rows[0]!.n, indexes: preds.length };
}

/**
 * Ways the outbox's storage could write fewer index entries a message, each as DDL applied to an
 * outbox before anything is written (the bench's wal section measures each against the storage as
 * it is). Measurements of a design, not the product: what reads each dropped index serves (the
 * queue's age, a message by public id, finished messages by time) would need another way first.
 */
export const STORAGE_CANDIDATES = {
  /** Depth and age read elsewhere: one entry less at insert. */
  noPendingCreatedIndex: 'drop index outbox_pending_created_idx',
  /** Finished messages by time through a BRIN index (summaries, no entry a row): one entry less at DONE. */
  processedAtBrin: `drop index outbox_done_processed_idx;
    create index outbox_done_processed_brin on outbox using brin (processed_at) where status = 'DONE'`,
  /** A public id derived from the id, no unique index of its own: one entry less at insert and at DONE. */
  noPublicIdIndex: `do $$ declare r record; begin
      for r in select conrelid::regclass::text as t, conname from pg_constraint where conname like 'outbox%public_id_key' loop
        execute format('alter table %s drop constraint %I', r.t, r.conname);
      end loop;
    end $$`,
} as const;

/** Applies the named candidates' DDL (STORAGE_CANDIDATES) to the outbox `c` is connected to. */
export async function applyStorageCandidates(c: Queryable, names: readonly (keyof typeof STORAGE_CANDIDATES)[]): Promise<void> {
  for (const name of names) await c.query(STORAGE_CANDIDATES[name]);
}

/**
 * Gives the PENDING messages the trace context a traced producer stores: `flags` '-01' sampled,
 * '-00' not.
 */
export async function storeTraceContext(c: Queryable, flags: '-00' | '-01'): Promise<void> {
  await c.query(
    `update outbox set traceparent = '00-' || md5(id::text) || '-' || left(md5('s' || id), 16) || $1 where status = 'PENDING'`,
    [flags],
  );
}

/**
 * `rows` DONE messages of `topic` as the worker leaves them (`handlersDone` succeeded), created
 * 1 ms apart from `created` on and processed 1 ms apart from `processed` on, in one statement.
 * `created` decides the partition (a day holds 86,400,000 of them).
 */
export async function fillDoneHistory(
  c: Queryable,
  rows: number,
  created: Date,
  processed: Date,
  done: { topic: string; handlersDone: readonly string[] },
): Promise<number> {
  const r = await c.query(
    `insert into outbox (topic, key, payload, status, attempts, available_at, processed_at, created_at, handlers_done)
     select $4, outbox_uuid_v7()::text, jsonb_build_object('i', i), 'DONE', 1,
            $2::timestamptz + i * interval '1 ms', $3::timestamptz + i * interval '1 ms', $2::timestamptz + i * interval '1 ms',
            $5::text[]
       from generate_series(1, $1::int) i`,
    [rows, created, processed, done.topic, done.handlersDone],
  );
  return r.rowCount ?? 0;
}

/** How many messages as written (lane messages left out) of `topic` since `since` carry each value of payload field `field`. */
export async function payloadValueCounts(c: Queryable, topic: string, field: string, since: string): Promise<Map<string, number>> {
  const { rows } = await c.query<{ id: string; n: number }>(
    `select payload->>$3 as id, count(*)::int as n from outbox
      where topic = $1 and lane is null and created_at >= $2
      group by 1`,
    [topic, since, field],
  );
  return new Map(rows.map((r) => [r.id, r.n]));
}

/**
 * A flood of `count` rows of `topic` in one statement. With `turns`: each row's turn is what
 * enqueue would give it written one by one (outbox_turn once for the first row, then + 1 per row,
 * as the group's previous turn + 1 is), at `priority`; without: neither (as before turns).
 */
export async function insertFlood(
  c: Queryable,
  topic: string,
  payload: string,
  count: number,
  turns: { group: string; priority: number } | null,
): Promise<void> {
  await c.query(
    turns
      ? `with t as materialized (select outbox_turn($4, $2) as first)
         insert into outbox (topic, key, payload, priority, group_id, turn)
         select $5, outbox_uuid_v7()::text, $1::jsonb, $2, $4, t.first + s - 1
           from t, generate_series(1, $3::int) s`
      : `insert into outbox (topic, key, payload)
         select $3, outbox_uuid_v7()::text, $1::jsonb from generate_series(1, $2::int) s`,
    turns ? [payload, turns.priority, count, turns.group, topic] : [payload, count, topic],
  );
}

/**
 * One message as enqueue writes it (`turn`: its priority, group and turn) or as it was written
 * before turns (null), its wake-up inside its transaction; returns its public id.
 */
export async function insertEventRow(
  c: Queryable,
  topic: string,
  payload: string,
  turn: { group: string; priority: number } | null,
): Promise<string> {
  const { rows } = await c.query<{ public_id: string }>(
    turn !== null
      ? `with ins as (insert into outbox (topic, key, payload, priority, group_id, turn)
                      values ($4, outbox_uuid_v7()::text, $1::jsonb, $2, $3, outbox_turn($3, $2))
                      returning public_id, topic)
         select public_id, pg_notify('outbox', topic) from ins`
      : `with ins as (insert into outbox (topic, key, payload) values ($2, outbox_uuid_v7()::text, $1::jsonb) returning public_id, topic)
         select public_id, pg_notify('outbox', topic) from ins`,
    turn !== null ? [payload, turn.priority, turn.group, topic] : [payload, topic],
  );
  return rows[0]!.public_id;
}

// ---------------------------------------------------------------------------------------------
// The runner's pure parts, for unit tests.

export { describeFailure, isPermanent, NEUTRAL_FAILURE_RULES } from './runner/failures.ts';
export { verdictAfterRun, verdictBeforeRun, postponeDelaySeconds, ALREADY_DONE } from './runner/verdict.ts';
export { mergeByPriority } from './runner/local-queue.ts';
export { ClaimSize } from './runner/claim-size.ts';

// ---------------------------------------------------------------------------------------------
// The store's statements, called one at a time by tests that check their SQL (fences, order, plans).

export { CLAIM_SQL, CLAIM_STATEMENT } from './claim.ts';
export {
  applyClaimSettings,
  CLAIM_SESSION_SETTINGS,
  CLAIM_SET_STATEMENT,
  ClaimConnection,
  ClaimSettingsError,
} from './claim-connection.ts';
export { markDone, markDead, recordHandlerDone, releaseUnknownTopic, scheduleRetry } from './settle.ts';
export { dropExpiredOutboxPartitions } from './partitions.ts';
export { CoalescedWakeUp } from './wake-up.ts';
export { intArray, textArray, uuidArray } from './sql.ts';
export { extendLeases, handBack } from './lease.ts';
export { deferToLanes } from './lanes.ts';
