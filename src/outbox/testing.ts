import type pg from 'pg';
import type { Db } from '../db/client.ts';
import { execute, executorOf, run, statement, unnamed, type Executor } from './executor.ts';
import { wakeUpNaming } from './channel.ts';
import { deferToLanes as deferToLanesOn } from './lanes.ts';
import { extendLeases as extendLeasesOn, handBack as handBackOn } from './lease.ts';
import { ensureOutboxPartitions, listOutboxPartitions } from './partitions.ts';
import { pendingRows } from './pending-rows.ts';
import {
  markDead as markDeadOn,
  markDone as markDoneOn,
  markDoneMany as markDoneManyOn,
  recordHandlerDone as recordHandlerDoneOn,
  releaseUnknownTopic as releaseUnknownTopicOn,
  scheduleRetry as scheduleRetryOn,
} from './settle.ts';

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
export { dayOf, dropOutboxPartition, listOutboxPartitions } from './partitions.ts';
export { purgeDoneBatch } from './purge.ts';
export { pendingRows } from './pending-rows.ts';
export { publicIdParts } from './public-id.ts';
// markDoneMany, the DONE write: with the worker's other writes at the end of this file.

// The outbox's tables as drizzle declares them (the schema-drift check compares a database with them).
export { outbox, outboxAudit, outboxMigrationRecords, outboxWalPosition } from './schema.ts';
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
const INSERT_MESSAGES = statement(
  'outbox-testing-insert-messages',
  `insert into outbox (topic, key, payload)
   select t, k, p::jsonb
     from unnest($1::text[], $2::text[], $3::text[]) with ordinality as x(t, k, p, n)
    order by n
   returning id`,
);

export async function insertMessages(db: Db, messages: { topic: string; payload?: unknown; key?: string | null }[]): Promise<MessageRow[]> {
  const pool = executorOf(db);
  const ids: number[] = [];
  for (let i = 0; i < messages.length; i += 1000) {
    const chunk = messages.slice(i, i + 1000);
    const rows = await run<{ id: string }>(pool, INSERT_MESSAGES, [
      chunk.map((m) => m.topic),
      chunk.map((m) => m.key ?? null),
      chunk.map((m) => JSON.stringify(m.payload ?? {})),
    ]);
    ids.push(...rows.map((r) => Number(r.id)));
  }
  return ids.length ? getMessages(db, ids) : [];
}

const GET_MESSAGES = statement(
  'outbox-testing-get-messages',
  `select id::int as id, public_id, topic, key, status, attempts, handlers_done, claim_id, last_error, processed_at,
          extract(epoch from greatest(available_at, leased_until) - now())::float8 as due_in,
          extract(epoch from available_at - claimed_at)::float8 as scheduled_after_claim
     from outbox where id = any($1::bigint[]) order by id`,
);

/** The rows behind `ids` (internal ids), in id order. */
export function getMessages(db: Db, ids: number[]): Promise<MessageRow[]> {
  return run<MessageRow>(executorOf(db), GET_MESSAGES, [ids]);
}

const MAKE_DUE = statement(
  'outbox-testing-make-due',
  `update outbox set available_at = now(), leased_until = null where status = 'PENDING' and id = any($1::bigint[])`,
);
const MAKE_ALL_DUE = statement(
  'outbox-testing-make-all-due',
  `update outbox set available_at = now(), leased_until = null where status = 'PENDING'`,
);

/** Time travel: makes PENDING messages (all, or the given ones) due now, as if their wait (backoff or lease) were over. */
export async function makeDue(db: Db, ids?: number[]): Promise<void> {
  await (ids ? execute(executorOf(db), MAKE_DUE, [ids]) : execute(executorOf(db), MAKE_ALL_DUE, []));
}

const SCHEDULED_DELAYS = statement(
  'outbox-testing-scheduled-delays',
  `select id::int as id,
          extract(epoch from available_at - $1::timestamptz)::float8 as min,
          extract(epoch from available_at - claimed_at)::float8 as max
     from outbox where id = any($2::bigint[]) order by id`,
);

/**
 * The backoff a settle scheduled, bracketed without wall-clock slack: the settle ran after the
 * claim and before `settledBy` (a database clock read once the run was over), so the delay it
 * added to its own now() lies within [available_at − settledBy, available_at − claimed_at] seconds.
 */
export function scheduledDelays(db: Db, ids: number[], settledBy: string): Promise<{ id: number; min: number; max: number }[]> {
  return run<{ id: number; min: number; max: number }>(executorOf(db), SCHEDULED_DELAYS, [settledBy, ids]);
}

/** Every row of the outbox, lane messages included. */
export async function countMessages(q: Executor): Promise<number> {
  return (await run<{ n: number }>(q, COUNT_MESSAGES, []))[0]!.n;
}

const COUNT_MESSAGES = statement('outbox-testing-count', 'select count(*)::int as n from outbox');

/** DDL and maintenance, whose text names a table: unnamed, as a simple query. */
async function ddl(q: Executor, text: string): Promise<void> {
  await execute(q, unnamed(text), []);
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
    await ddl(pool, `alter table outbox detach partition ${p.name}`);
    await ddl(pool, `drop table ${p.name}`);
  }
  const first = new Date(Math.floor(Date.now() / 86_400_000 - daysBack) * 86_400_000);
  await ddl(pool, 'create table outbox_before (like outbox including defaults including constraints)');
  await ddl(pool, 'alter table outbox_before add primary key (id)');
  await ddl(pool, `alter table outbox attach partition outbox_before for values from (minvalue) to ('${first.toISOString()}')`);
  await ensureOutboxPartitions(pool);
}

const TABLE_STATE = statement(
  'outbox-testing-table-state',
  `select exists (select 1 from pg_inherits where inhrelid = c.oid and inhparent = 'outbox'::regclass) as partition
     from pg_class c where c.relname = $1 and c.relnamespace = 'public'::regnamespace`,
);

/** Where a table named `name` stands: no such table, a table alone, or a partition of the outbox. */
export async function tableState(pool: pg.Pool, name: string): Promise<'absent' | 'alone' | 'partition'> {
  const rows = await run<{ partition: boolean }>(pool, TABLE_STATE, [name]);
  if (!rows.length) return 'absent';
  return rows[0]!.partition ? 'partition' : 'alone';
}

/** A crash between a drop's two statements, or a person: the day's partition detached and left as a table. */
export async function detachDay(pool: pg.Pool, name: string): Promise<void> {
  await ddl(pool, `alter table outbox detach partition ${name}`);
}

// ---------------------------------------------------------------------------------------------
// The bench and the chaos run: backlogs in one statement, sizes, counts.

/**
 * Our end of a run: nothing PENDING (the bench's settle watch polls it for every system's clock),
 * through the claim's two partial indexes, so a poll never scans the DONE history.
 */
export const PENDING_PROBE_SQL = `select 1 from ${pendingRows('1')} as pending`;

/** Whether this database holds our outbox (a bench peer's does not). */
export async function outboxExists(c: Executor): Promise<boolean> {
  const [row] = await run<{ ours: boolean }>(c, OUTBOX_EXISTS, []);
  return row?.ours ?? false;
}

const OUTBOX_EXISTS = statement('outbox-testing-exists', `select to_regclass('outbox') is not null as ours`);

/** `count` messages of `topic`, payload `{ i }`, in one statement (a backlog, or the claim's PENDING rows). */
const FILL_BACKLOG = statement(
  'outbox-testing-fill-backlog',
  `insert into outbox (topic, key, payload)
   select $1, outbox_uuid_v7()::text, jsonb_build_object('i', i) from generate_series(1, $2::int) i`,
);

export async function fillBacklog(c: Executor, topic: string, count: number): Promise<void> {
  await execute(c, FILL_BACKLOG, [topic, count]);
}

const FILL_WARM_UP = statement(
  'outbox-testing-fill-warm-up',
  `insert into outbox (topic, key, payload) select $1, outbox_uuid_v7()::text, jsonb_build_object('id', -i) from generate_series(1, $2::int) i`,
);

/** The latency section's warm-up: `count` messages of `topic`, payload `{ id: -i }` (no sample's id), and their wake-up. */
export async function fillWarmUp(c: Executor, topic: string, count: number): Promise<void> {
  await execute(c, FILL_WARM_UP, [topic, count]);
  await wakeUp(c, topic);
}

/**
 * One message `{ id }` as enqueue writes it without a group (src/outbox/enqueue.ts): its turn from
 * outbox_turn, so it waits in the claim's index of first deliveries, where the product's messages
 * do. With `wakeUp`, its pg_notify in the same statement, delivered by the COMMIT (what enqueue
 * does alone).
 */
const ONE_ROW = `insert into outbox (topic, key, payload, turn)
   values ($1, outbox_uuid_v7()::text, jsonb_build_object('id', $2::int), outbox_turn(null::text, null::text, 0))`;
const INSERT_ONE_WAKING = statement(
  'outbox-testing-insert-one-waking-v2',
  `with ins as (${ONE_ROW} returning public_id) select ${wakeUpNaming('public_id')} from ins`,
);
const INSERT_ONE = statement('outbox-testing-insert-one-v2', ONE_ROW);

export async function insertOne(c: Executor, topic: string, id: number, opts: { wakeUp: boolean }): Promise<void> {
  await execute(c, opts.wakeUp ? INSERT_ONE_WAKING : INSERT_ONE, [topic, id]);
}

/** Messages with the given payloads and keys `<prefix><offset + n>` (n from 1), in one statement. */
const INSERT_PAYLOADS = statement(
  'outbox-testing-insert-payloads',
  `insert into outbox (topic, key, payload)
   select $3, $4::text || (n + $2), p::jsonb from unnest($1::text[]) with ordinality as x(p, n)`,
);

export async function insertPayloads(c: Executor, topic: string, payloads: string[], keyPrefix: string, offset: number): Promise<void> {
  await execute(c, INSERT_PAYLOADS, [payloads, offset, topic, keyPrefix]);
}

/** The worker's wake-up for `topic`, as a producer sends it after its COMMIT. */
export async function wakeUp(c: Executor, topic: string): Promise<void> {
  await execute(c, WAKE_UP, [topic]);
}

const WAKE_UP = statement('outbox-testing-wake-up', `select pg_notify('outbox', $1)`);

/** Messages PENDING. */
export async function countPending(c: Executor): Promise<number> {
  return Number((await run<{ n: string }>(c, COUNT_PENDING, []))[0]!.n);
}

const COUNT_PENDING = statement('outbox-testing-count-pending', `select count(*) as n from ${pendingRows('1')} as pending`);

/** Messages not DONE (PENDING, or DEAD): a drain that left any is broken, not slow. */
export async function countNotDone(c: Executor): Promise<number> {
  return (await run<{ n: number }>(c, COUNT_NOT_DONE, []))[0]!.n;
}

const COUNT_NOT_DONE = statement('outbox-testing-count-not-done', `select count(*)::int as n from outbox where status <> 'DONE'`);

const STATUS_COUNTS = statement(
  'outbox-testing-status-counts',
  `select status, count(*)::int n, count(*) filter (where leased_until > now())::int leased, count(*) filter (where claim_id is not null)::int claimed from outbox group by status`,
);

/** Per status: messages, leased now, claimed (the picture of a burst). */
export async function statusCounts(c: Executor): Promise<{ status: string; n: number; leased: number; claimed: number }[]> {
  return run<{ status: string; n: number; leased: number; claimed: number }>(c, STATUS_COUNTS, []);
}

/** Truncates the outbox (a run that starts from nothing). */
export async function emptyOutbox(c: Executor): Promise<void> {
  await ddl(c, 'truncate outbox');
}

/**
 * VACUUM ANALYZE, or ANALYZE alone: the statistics autovacuum would have after a table grew this
 * way; `analyze: false`, a plain VACUUM (what autovacuum does after a DELETE, timed by the purge).
 */
export async function analyzeOutbox(c: Executor, opts: { vacuum: boolean; analyze?: boolean }): Promise<void> {
  const analyze = opts.analyze ?? true;
  await ddl(c, opts.vacuum ? (analyze ? 'vacuum analyze outbox' : 'vacuum outbox') : 'analyze outbox');
}

export type Sizes = { table: number; pendingIdx: number; keyIdx: number };

const SIZES = statement(
  'outbox-testing-sizes',
  `select (select coalesce(sum(pg_total_relation_size(relid)), 0) from pg_partition_tree('outbox') where isleaf) as table,
          (select coalesce(sum(pg_relation_size(relid)), 0) from pg_partition_tree('outbox_pending_available_idx') where isleaf) as pending_idx,
          (select coalesce(sum(pg_relation_size(relid)), 0) from pg_partition_tree('outbox_key_idx') where isleaf) as key_idx`,
);

/**
 * The outbox's sizes. The partitioned parent and its partitioned indexes hold no data of their
 * own (their size is 0): each is the sum over its leaves, the partitions and their indexes.
 */
export const outboxSizes = async (c: Executor): Promise<Sizes> => {
  const rows = await run<{ table: string; pending_idx: string; key_idx: string }>(c, SIZES, []);
  return { table: Number(rows[0]!.table), pendingIdx: Number(rows[0]!.pending_idx), keyIdx: Number(rows[0]!.key_idx) };
};

const NEWEST_ROW = statement(
  'outbox-testing-newest-row',
  `select id, tableoid::regclass::text as part from outbox order by id desc limit 1`,
);
const INDEX_PREDICATES = statement(
  'outbox-testing-index-predicates',
  `select pg_get_expr(indpred, indrelid) as pred from pg_index where indrelid = $1::regclass`,
);

/**
 * How many index entries the newest message wrote, and how many indexes its partition has. The
 * indexes are partial (src/outbox/schema.ts), so a row enters only those whose predicate it
 * meets: each predicate is evaluated on the row itself, which must still be as it was written
 * (nothing has claimed it). Null on an empty outbox.
 */
export async function newestRowIndexEntries(c: Executor): Promise<{ entries: number; indexes: number } | null> {
  const [row] = await run<{ id: string; part: string }>(c, NEWEST_ROW, []);
  if (!row) return null;
  const preds = await run<{ pred: string | null }>(c, INDEX_PREDICATES, [row.part]);
  const terms = preds.map((p) => (p.pred === null ? '1' : `(case when ${p.pred} then 1 else 0 end)`));
  // Built from the partition's own predicates: unnamed.
  const rows = await run<{ n: number }>(c, unnamed(`select (${terms.join(' + ')})::int as n from ${row.part} where id = $1`), [row.id]);
  return { entries: rows[0]!.n, indexes: preds.length };
}

const STORE_TRACE_CONTEXT = statement(
  'outbox-testing-store-trace-context',
  `update outbox set traceparent = '00-' || md5(id::text) || '-' || left(md5('s' || id), 16) || $1 where status = 'PENDING'`,
);

/** A way the outbox's storage could write fewer index entries a message, as DDL and a label for the report. */
export interface StorageCandidate {
  label: string;
  ddl: string;
}

/**
 * The ways under study, each applied to an outbox before anything is written (the bench's wal
 * section measures each against the storage as it is). Measurements of a design, not the product:
 * what reads each dropped index serves would need another way first. A cut that is built is a
 * migration (src/outbox/migrations/) and no longer a candidate: the lean storage's three (ADR
 * 0051) are built, and none is under study now.
 */
export const STORAGE_CANDIDATES: Readonly<Record<string, StorageCandidate>> = {};

/** Applies the named candidates' DDL (STORAGE_CANDIDATES) to the outbox `c` is connected to. */
export async function applyStorageCandidates(c: Executor, names: readonly string[]): Promise<void> {
  for (const name of names) {
    const candidate = STORAGE_CANDIDATES[name];
    if (!candidate) throw new Error(`no storage candidate ${name} (known: ${Object.keys(STORAGE_CANDIDATES).join(', ') || 'none'})`);
    await ddl(c, candidate.ddl);
  }
}

/**
 * Gives the PENDING messages the trace context a traced producer stores: `flags` '-01' sampled,
 * '-00' not.
 */
export async function storeTraceContext(c: Executor, flags: '-00' | '-01'): Promise<void> {
  await execute(c, STORE_TRACE_CONTEXT, [flags]);
}

/**
 * Index entries read so far from the PENDING turns' index (outbox_pending_turn_idx), every day of
 * it, with `c`'s own reads flushed to the statistics first: what outbox_turn's head probe and the
 * claim's walk of first deliveries pass, dead entries included.
 */
export async function pendingTurnIndexReads(c: pg.Client): Promise<number> {
  await c.query('select pg_stat_force_next_flush()');
  const { rows } = await c.query<{ n: number }>(
    `select coalesce(sum(s.idx_tup_read), 0)::int as n
       from pg_stat_user_indexes s join pg_inherits i on i.inhrelid = s.indexrelid
      where i.inhparent = 'outbox_pending_turn_idx'::regclass`,
  );
  return rows[0]!.n;
}

const FILL_DONE_HISTORY = statement(
  'outbox-testing-fill-done-history',
  `insert into outbox (topic, key, payload, status, attempts, available_at, processed_at, created_at, handlers_done)
   select $4, outbox_uuid_v7()::text, jsonb_build_object('i', i), 'DONE', 1,
          $2::timestamptz + i * interval '1 ms', $3::timestamptz + i * interval '1 ms', $2::timestamptz + i * interval '1 ms',
          $5::text[]
     from generate_series(1, $1::int) i`,
);

/**
 * `rows` DONE messages of `topic` as the worker leaves them (`handlersDone` succeeded), created
 * 1 ms apart from `created` on and processed 1 ms apart from `processed` on, in one statement.
 * `created` decides the partition (a day holds 86,400,000 of them).
 */
export async function fillDoneHistory(
  c: Executor,
  rows: number,
  created: Date,
  processed: Date,
  done: { topic: string; handlersDone: readonly string[] },
): Promise<number> {
  const r = await execute(c, FILL_DONE_HISTORY, [rows, created, processed, done.topic, done.handlersDone]);
  return r.rowCount ?? 0;
}

const PAYLOAD_VALUE_COUNTS = statement(
  'outbox-testing-payload-value-counts',
  `select payload->>$3 as id, count(*)::int as n from outbox
    where topic = $1 and lane is null and created_at >= $2
    group by 1`,
);

/** How many messages as written (lane messages left out) of `topic` since `since` carry each value of payload field `field`. */
export async function payloadValueCounts(c: Executor, topic: string, field: string, since: string): Promise<Map<string, number>> {
  const rows = await run<{ id: string; n: number }>(c, PAYLOAD_VALUE_COUNTS, [topic, since, field]);
  return new Map(rows.map((r) => [r.id, r.n]));
}

const FLOOD_WITH_TURNS = statement(
  'outbox-testing-flood-turns',
  `with t as materialized (select outbox_turn($4, $2) as first)
   insert into outbox (topic, key, payload, priority, group_id, turn)
   select $5, outbox_uuid_v7()::text, $1::jsonb, $2, $4, t.first + s - 1
     from t, generate_series(1, $3::int) s`,
);
const FLOOD = statement(
  'outbox-testing-flood',
  `insert into outbox (topic, key, payload)
   select $3, outbox_uuid_v7()::text, $1::jsonb from generate_series(1, $2::int) s`,
);

/**
 * A flood of `count` rows of `topic` in one statement. With `turns`: each row's turn is what
 * enqueue would give it written one by one (outbox_turn once for the first row, then + 1 per row,
 * as the group's previous turn + 1 is), at `priority`; without: neither (as before turns).
 */
export async function insertFlood(
  c: Executor,
  topic: string,
  payload: string,
  count: number,
  turns: { group: string; priority: number } | null,
): Promise<void> {
  await (turns
    ? execute(c, FLOOD_WITH_TURNS, [payload, turns.priority, count, turns.group, topic])
    : execute(c, FLOOD, [payload, count, topic]));
}

const EVENT_ROW_WITH_TURN = statement(
  'outbox-testing-event-row-turn',
  `with ins as (insert into outbox (topic, key, payload, priority, group_id, turn)
                values ($4, outbox_uuid_v7()::text, $1::jsonb, $2, $3, outbox_turn($3, $2))
                returning public_id, topic)
   select public_id, ${wakeUpNaming('public_id')} from ins`,
);
const EVENT_ROW = statement(
  'outbox-testing-event-row',
  `with ins as (insert into outbox (topic, key, payload) values ($2, outbox_uuid_v7()::text, $1::jsonb) returning public_id, topic)
   select public_id, ${wakeUpNaming('public_id')} from ins`,
);

/**
 * One message as enqueue writes it (`turn`: its priority, group and turn) or as it was written
 * before turns (null), its wake-up inside its transaction; returns its public id.
 */
export async function insertEventRow(
  c: Executor,
  topic: string,
  payload: string,
  turn: { group: string; priority: number } | null,
): Promise<string> {
  const [row] =
    turn !== null
      ? await run<{ public_id: string }>(c, EVENT_ROW_WITH_TURN, [payload, turn.priority, turn.group, topic])
      : await run<{ public_id: string }>(c, EVENT_ROW, [payload, topic]);
  return row!.public_id;
}

// ---------------------------------------------------------------------------------------------
// The runner's pure parts, for unit tests.

export { describeFailure, isPermanent, NEUTRAL_FAILURE_RULES } from './runner/failures.ts';
export { verdictAfterRun, verdictBeforeRun, postponeDelaySeconds, ALREADY_DONE } from './runner/verdict.ts';
export { mergeByPriority } from './runner/local-queue.ts';
export { ClaimSize } from './runner/claim-size.ts';

// ---------------------------------------------------------------------------------------------
// The store's statements, called one at a time by tests that check their SQL (fences, order, plans).

export { CLAIM, CLAIM_AGED, CLAIM_IDS, CLAIM_SQL, CLAIM_STATEMENT, type NotifiedMessage } from './claim.ts';
export { notifiedBy } from './channel.ts';
export { LoopWaits } from './runner/waits.ts';
export { PollWalks } from './runner/poll-walks.ts';
export { ClaimConnection } from './claim-connection.ts';
export {
  applyPlannedSettings,
  explainStatement,
  PLANNED_SESSION_SETTINGS,
  PLANNED_SET_STATEMENT,
  PlannedConnection,
  SessionSettingsError,
} from './planned-connection.ts';
export { MARK_DONE, markDoneMany as markDoneManyOn } from './settle.ts';
export { dropExpiredOutboxPartitions } from './partitions.ts';
export { CoalescedWakeUp } from './wake-up.ts';
export { intArray, textArray, uuidArray } from './sql.ts';

/**
 * The worker's writes as tests and the bench call them: on the application's drizzle database,
 * sent on its pool, as the worker sends them.
 */
function onDb<A extends unknown[], R>(verb: (q: Executor, ...args: A) => R): (db: Db, ...args: A) => R {
  return (db, ...args) => verb(executorOf(db), ...args);
}

export const markDoneMany = onDb(markDoneManyOn);
export const markDone = onDb(markDoneOn);
export const markDead = onDb(markDeadOn);
export const recordHandlerDone = onDb(recordHandlerDoneOn);
export const releaseUnknownTopic = onDb(releaseUnknownTopicOn);
export const scheduleRetry = onDb(scheduleRetryOn);
export const extendLeases = onDb(extendLeasesOn);
export const handBack = onDb(handBackOn);
export const deferToLanes = onDb(deferToLanesOn);
