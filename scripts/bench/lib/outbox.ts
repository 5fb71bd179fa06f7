import type pg from 'pg';
import { priorityOf } from '../../../src/messages/topics.ts';

/*
 * The bench's one door into our outbox. The bench writes rows the product never writes (bench
 * topics, a backlog of N messages in one statement, a DONE history) and measures statements of
 * src/outbox that are not its public surface (the claim, the DONE write, the purge's batch, a
 * partition's drop): both are here, so nothing else under scripts/bench/ names the outbox table or
 * reaches past src/outbox/index.ts. Each statement writes what `enqueue` would (one row a message,
 * a time-ordered unique key: src/db/uuid-v7.ts, ADR 0018) but many at once, before a clock starts.
 *
 * Not here: the pgbench booking transaction (api-pgbench.ts), a plain-SQL replica of the service's
 * own, which must stay one script pgbench runs.
 */

// Statements the bench measures, or measures against, as the worker and the housekeeping run them.
export { claimOn } from '../../../src/outbox/claim.ts';
export { connectClaimClient, explainClaim as explainCachedClaim } from '../../../src/outbox/claim-connection.ts';
export { markDoneMany } from '../../../src/outbox/settle.ts';
export { dayOf, dropOutboxPartition, listOutboxPartitions } from '../../../src/outbox/partitions.ts';
export { purgeDoneBatch } from '../../../src/outbox/purge.ts';

/** Our end of a run: nothing PENDING (lib/settled.ts polls it for every system's clock). */
export const OURS_PENDING_SQL = `select 1 from outbox where status = 'PENDING'`;

/** `count` messages of `topic`, payload `{ i }`, in one statement (a backlog, or the claim's PENDING rows). */
export async function fillBacklog(c: pg.Client, topic: string, count: number): Promise<void> {
  await c.query(
    `insert into outbox (topic, key, payload)
     select $1, outbox_uuid_v7()::text, jsonb_build_object('i', i) from generate_series(1, $2::int) i`,
    [topic, count],
  );
}

/** The latency section's warm-up: `count` messages of `topic`, payload `{ id: -i }` (no sample's id), and their wake-up. */
export async function fillWarmUp(c: pg.Client, topic: string, count: number): Promise<void> {
  await c.query(
    `insert into outbox (topic, key, payload) select $1, outbox_uuid_v7()::text, jsonb_build_object('id', -i) from generate_series(1, $2::int) i`,
    [topic, count],
  );
  await wakeUp(c, topic);
}

/** One message `{ id }`; with `wakeUp`, its pg_notify in the same statement, delivered by the COMMIT (what enqueue does alone). */
export async function insertOne(c: pg.Client, topic: string, id: number, opts: { wakeUp: boolean }): Promise<void> {
  await c.query(
    opts.wakeUp
      ? `with ins as (insert into outbox (topic, key, payload) values ($1, outbox_uuid_v7()::text, jsonb_build_object('id', $2::int)) returning topic)
         select pg_notify('outbox', topic) from ins`
      : `insert into outbox (topic, key, payload) values ($1, outbox_uuid_v7()::text, jsonb_build_object('id', $2::int))`,
    [topic, id],
  );
}

/** Messages with the given payloads and keys `<prefix><offset + n>` (n from 1), in one statement. */
export async function insertPayloads(c: pg.Client, topic: string, payloads: string[], keyPrefix: string, offset: number): Promise<void> {
  await c.query(
    `insert into outbox (topic, key, payload)
     select $3, $4::text || (n + $2), p::jsonb from unnest($1::text[]) with ordinality as x(p, n)`,
    [payloads, offset, topic, keyPrefix],
  );
}

/** The worker's wake-up for `topic`, as a producer sends it after its COMMIT. */
export async function wakeUp(c: pg.Client, topic: string): Promise<void> {
  await c.query(`select pg_notify('outbox', $1)`, [topic]);
}

/** Messages PENDING. */
export async function countPending(c: pg.Client): Promise<number> {
  return Number((await c.query<{ n: string }>(`select count(*) as n from outbox where status = 'PENDING'`)).rows[0]!.n);
}

/** Messages not DONE (PENDING, or DEAD): a drain that left any is broken, not slow. */
export async function countNotDone(c: pg.Client): Promise<number> {
  return (await c.query<{ n: number }>(`select count(*)::int as n from outbox where status <> 'DONE'`)).rows[0]!.n;
}

/** Per status: messages, leased now, claimed (BENCH_BURST_TRACE's picture of a burst). */
export async function statusCounts(c: pg.Client): Promise<{ status: string; n: number; leased: number; claimed: number }[]> {
  const { rows } = await c.query<{ status: string; n: number; leased: number; claimed: number }>(
    `select status, count(*)::int n, count(*) filter (where leased_until > now())::int leased, count(*) filter (where claim_id is not null)::int claimed from outbox group by status`,
  );
  return rows;
}

/** Truncates the outbox (a relay run starts from nothing). */
export async function emptyOutbox(c: pg.Client): Promise<void> {
  await c.query('truncate outbox');
}

/**
 * VACUUM ANALYZE, or ANALYZE alone: the statistics autovacuum would have after a table grew this
 * way; `analyze: false`, a plain VACUUM (what autovacuum does after a DELETE, timed by the purge).
 */
export async function analyzeOutbox(c: pg.Client, opts: { vacuum: boolean; analyze?: boolean }): Promise<void> {
  const analyze = opts.analyze ?? true;
  await c.query(opts.vacuum ? (analyze ? 'vacuum analyze outbox' : 'vacuum outbox') : 'analyze outbox');
}

export type Sizes = { table: number; pendingIdx: number; keyIdx: number };

/**
 * The outbox's sizes. The partitioned parent and its partitioned indexes hold no data of their
 * own (their size is 0): each is the sum over its leaves, the partitions and their indexes.
 */
export const outboxSizes = async (c: pg.Client): Promise<Sizes> => {
  const { rows } = await c.query<{ table: string; pending_idx: string; key_idx: string }>(
    `select (select coalesce(sum(pg_total_relation_size(relid)), 0) from pg_partition_tree('outbox') where isleaf) as table,
            (select coalesce(sum(pg_relation_size(relid)), 0) from pg_partition_tree('outbox_pending_available_idx') where isleaf) as pending_idx,
            (select coalesce(sum(pg_relation_size(relid)), 0) from pg_partition_tree('outbox_key_idx') where isleaf) as key_idx`,
  );
  return { table: Number(rows[0]!.table), pendingIdx: Number(rows[0]!.pending_idx), keyIdx: Number(rows[0]!.key_idx) };
};

/**
 * Gives the PENDING messages the trace context a traced booking stores: `flags` '-01' sampled,
 * '-00' not (the tracing section's drain).
 */
export async function storeTraceContext(c: pg.Client, flags: '-00' | '-01'): Promise<void> {
  await c.query(
    `update outbox set traceparent = '00-' || md5(id::text) || '-' || left(md5('s' || id), 16) || $1 where status = 'PENDING'`,
    [flags],
  );
}

/**
 * `$1` DONE rows as the worker leaves them, created 1 ms apart from `$2` on and processed 1 ms
 * apart from `$3` on: the history every long-outbox measurement starts from. `$2` decides the
 * partition (a day holds 86,400,000 of them): the claim section's history, 30 days back, shares
 * the first partition with the PENDING rows; the purge and growth sections' is a day of its own
 * (history.ts).
 */
export async function fillDoneHistory(c: pg.Client, rows: number, created: Date, processed: Date): Promise<number> {
  const r = await c.query(
    `insert into outbox (topic, key, payload, status, attempts, available_at, processed_at, created_at, handlers_done)
     select 'booking.created', outbox_uuid_v7()::text, jsonb_build_object('i', i), 'DONE', 1,
            $2::timestamptz + i * interval '1 ms', $3::timestamptz + i * interval '1 ms', $2::timestamptz + i * interval '1 ms',
            '{guest-confirmation}'
       from generate_series(1, $1::int) i`,
    [rows, created, processed],
  );
  return r.rowCount ?? 0;
}

/** How many booking.created originals (lane copies left out) the outbox holds for each booking id, since `since`. */
export async function bookingEventsSince(c: pg.Client, since: string): Promise<Map<string, number>> {
  const { rows } = await c.query<{ id: string; n: number }>(
    `select payload->>'bookingId' as id, count(*)::int as n from outbox
      where topic = 'booking.created' and lane is null and created_at >= $1
      group by 1`,
    [since],
  );
  return new Map(rows.map((r) => [r.id, r.n]));
}

/**
 * The noisy neighbour's flood, `count` rows of `topic` in one statement. Fair: each row's turn is
 * what enqueue would give it written one by one (outbox_turn once for the first row, then + 1 per
 * row, as the group's previous turn + 1 is), at the topic's priority; FIFO: neither (as before turns).
 */
export async function fillFlood(
  c: pg.Client,
  topic: string,
  payload: string,
  count: number,
  fair: { group: string } | null,
): Promise<void> {
  await c.query(
    fair
      ? `with t as materialized (select outbox_turn($4, $2) as first)
         insert into outbox (topic, key, payload, priority, group_id, turn)
         select $5, outbox_uuid_v7()::text, $1::jsonb, $2, $4, t.first + s - 1
           from t, generate_series(1, $3::int) s`
      : `insert into outbox (topic, key, payload)
         select $3, outbox_uuid_v7()::text, $1::jsonb from generate_series(1, $2::int) s`,
    fair ? [payload, priorityOf(topic), count, fair.group, topic] : [payload, count, topic],
  );
}

/**
 * One event as enqueue writes it (`group`: its priority, group and turn) or as it was written
 * before turns (null), its wake-up inside its transaction; returns its public id.
 */
export async function insertEvent(c: pg.Client, topic: string, payload: string, group: string | null): Promise<string> {
  const { rows } = await c.query<{ public_id: string }>(
    group !== null
      ? `with ins as (insert into outbox (topic, key, payload, priority, group_id, turn)
                      values ($4, outbox_uuid_v7()::text, $1::jsonb, $2, $3, outbox_turn($3, $2))
                      returning public_id, topic)
         select public_id, pg_notify('outbox', topic) from ins`
      : `with ins as (insert into outbox (topic, key, payload) values ($2, outbox_uuid_v7()::text, $1::jsonb) returning public_id, topic)
         select public_id, pg_notify('outbox', topic) from ins`,
    group !== null ? [payload, priorityOf(topic), group, topic] : [payload, topic],
  );
  return rows[0]!.public_id;
}
