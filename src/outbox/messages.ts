import type { Db } from '../db/client.ts';
import { executorOf, run, statement, type Statement } from './executor.ts';
import { pendingRows } from './pending-rows.ts';
import { byPublicId } from './public-id.ts';
import type { OutboxStatus } from './schema.ts';

/** An outbox row as the admin side reads it (internal id kept only for paging). */
export interface OutboxMessageRow {
  id: number;
  publicId: string;
  topic: string;
  key: string | null;
  status: OutboxStatus;
  attempts: number;
  availableAt: Date;
  claimId: string | null;
  claimedAt: Date | null;
  /** The lease's deadline while claimed (null once settled or handed back). */
  leasedUntil: Date | null;
  handlersDone: string[];
  processedAt: Date | null;
  lastError: string | null;
  createdAt: Date;
  /** True while a worker holds the message (claimed, lease not yet run out). Computed by Postgres' clock. */
  leased: boolean;
  /** A lane message's handler and its original message (src/outbox/lanes.ts); null for a message as written. */
  lane: string | null;
  originId: string | null;
  /** The trace of the request that wrote it (its stored traceparent's trace id); null when tracing was off. */
  traceId: string | null;
}

type RawRow = {
  id: string;
  public_id: string;
  topic: string;
  key: string | null;
  status: OutboxStatus;
  attempts: number;
  available_at: Date;
  claim_id: string | null;
  claimed_at: Date | null;
  leased_until: Date | null;
  handlers_done: string[];
  processed_at: Date | null;
  last_error: string | null;
  created_at: Date;
  leased: boolean;
  lane: string | null;
  origin_id: string | null;
  trace_id: string | null;
};

const toRow = (r: RawRow): OutboxMessageRow => ({
  id: Number(r.id),
  publicId: r.public_id,
  topic: r.topic,
  key: r.key,
  status: r.status,
  attempts: r.attempts,
  availableAt: new Date(r.available_at),
  claimId: r.claim_id,
  claimedAt: r.claimed_at && new Date(r.claimed_at),
  leasedUntil: r.leased_until && new Date(r.leased_until),
  handlersDone: r.handlers_done,
  processedAt: r.processed_at && new Date(r.processed_at),
  lastError: r.last_error,
  createdAt: new Date(r.created_at),
  leased: r.leased,
  lane: r.lane,
  originId: r.origin_id,
  traceId: r.trace_id,
});

// "Leased" is the same predicate outboxStats uses: claimed, and the lease deadline still ahead.
// A claim whose lease ran out is claimable again, so it is not leased.
const COLUMNS = `id, public_id, topic, key, status, attempts, available_at, claim_id, claimed_at,
  leased_until, handlers_done, processed_at, last_error, created_at, lane, origin_id,
  nullif(split_part(traceparent, '-', 2), '') as trace_id,
  (status = 'PENDING' and claim_id is not null and leased_until > now()) as leased`;

export interface ListFilter {
  status?: OutboxStatus;
  topic?: string;
  /** Internal id of the last row of the previous page. */
  beforeId?: number;
  limit: number;
}

/**
 * Keyset pagination, newest first, on the internal id. `id < $cursor order by id desc limit n`
 * never repeats or skips a row when new messages arrive between pages, and costs the same on page
 * 100 as on page 1 (OFFSET would read and throw away every earlier row). For DEAD rows, the query
 * the dashboard runs every few seconds, the partial index outbox_dead_idx (topic, id) holds
 * exactly the candidates; PENDING and DONE walk the primary key backwards.
 */
export async function listMessages(db: Db, f: ListFilter): Promise<OutboxMessageRow[]> {
  const conds = ['true'];
  const values: unknown[] = [];
  const filter = (column: string, op: string, value: unknown) => {
    values.push(value);
    conds.push(`${column} ${op} $${values.length}`);
  };
  if (f.status) filter('status', '=', f.status);
  if (f.topic) filter('topic', '=', f.topic);
  if (f.beforeId !== undefined) filter('id', '<', f.beforeId);
  values.push(f.limit);
  const name = `outbox-list-messages${f.status ? '-status' : ''}${f.topic ? '-topic' : ''}${f.beforeId !== undefined ? '-before' : ''}`;
  const rows = await run<RawRow>(
    executorOf(db),
    listStatement(
      name,
      `select ${COLUMNS} from outbox
        where ${conds.join(' and ')}
        order by id desc
        limit $${values.length}`,
    ),
    values,
  );
  return rows.map(toRow);
}

/** The list's statements, one per set of filters given (eight at most), each built once. */
const listStatements = new Map<string, Statement>();

function listStatement(name: string, text: string): Statement {
  let s = listStatements.get(name);
  if (!s) listStatements.set(name, (s = statement(name, text)));
  return s;
}

const FIND = byPublicId<RawRow & { payload: unknown }>('outbox-find-message', `${COLUMNS}, payload`);

/** A message by its public id (public-id.ts: a probe of its day's primary key, never a scan). */
export async function findMessage(db: Db, publicId: string): Promise<(OutboxMessageRow & { payload: unknown }) | undefined> {
  const r = await FIND(executorOf(db), publicId);
  return r && { ...toRow(r), payload: r.payload };
}

const ID_OF = byPublicId<{ id: string }>('outbox-id-of', 'id');

/** The internal id behind a cursor's public id, if that message still exists (purge deletes old DONE rows). */
export async function idOf(db: Db, publicId: string): Promise<number | undefined> {
  const row = await ID_OF(executorOf(db), publicId);
  return row ? Number(row.id) : undefined;
}

export interface AuditEntry {
  at: Date;
  actor: string;
  action: string;
  affected: number;
}

const AUDIT_FOR = statement(
  'outbox-audit-for',
  `select created_at, actor, action, affected from outbox_audit
    where $1::uuid = any(message_ids)
    order by id`,
);

/**
 * Replays that included this message. outbox_audit is written once per replay by people, so it
 * stays small; a scan with `= any(message_ids)` is fine and needs no index.
 */
export async function auditFor(db: Db, publicId: string): Promise<AuditEntry[]> {
  const rows = await run<{ created_at: Date; actor: string; action: string; affected: number }>(executorOf(db), AUDIT_FOR, [publicId]);
  return rows.map((r) => ({ at: new Date(r.created_at), actor: r.actor, action: r.action, affected: r.affected }));
}

export interface DepthPoint {
  at: Date;
  /** Messages written but not yet DONE or DEAD at that moment (what the worker still owed). */
  pending: number;
  /** Messages that had died by then and are still DEAD now. */
  dead: number;
}

/** $1: the minutes. */
const DEPTH_HISTORY = statement(
  'outbox-depth-history',
  `with window_rows as (
     select * from ${pendingRows('o.created_at, o.processed_at, o.status')} as pending
     union all
     select created_at, processed_at, status from outbox where status = 'DEAD'
     union all
     select created_at, processed_at, status from outbox
      where status = 'DONE' and processed_at > now() - make_interval(mins => $1)
   ),
   points as (
     select generate_series(date_trunc('minute', now()) - make_interval(mins => $1),
                            date_trunc('minute', now()), interval '1 minute') as at
     union all
     select now()
   )
   select p.at,
          count(w.*) filter (where w.created_at <= p.at and (w.processed_at is null or w.processed_at > p.at)) as pending,
          count(w.*) filter (where w.status = 'DEAD' and w.processed_at <= p.at) as dead
     from points p left join window_rows w on w.created_at <= p.at
    group by p.at
    order by p.at`,
);

/**
 * Depth over the last `minutes`, one point a minute, reconstructed from the table itself rather
 * than sampled: a message was pending at time t if it was created by t and not yet processed
 * (DONE or DEAD) at t. Only three kinds of rows can have been pending in the window: those still
 * PENDING, those DEAD, and those that became DONE inside it; each is read through its own partial
 * indexes (the PENDING ones through the claim's two, pending-rows.ts; the DONE ones through the
 * BRIN index of processed_at, the pages whose summaries reach into the window), so the DONE history outside the window is never scanned. A message that died and was
 * replayed lost its first processed_at, so it counts as pending for its whole life: a small
 * overstatement, on the safe side.
 */
export async function depthHistory(db: Db, minutes: number): Promise<DepthPoint[]> {
  const rows = await run<{ at: Date; pending: string; dead: string }>(executorOf(db), DEPTH_HISTORY, [minutes]);
  return rows.map((r) => ({ at: new Date(r.at), pending: Number(r.pending), dead: Number(r.dead) }));
}

/** An outbox message as a republisher reads it: identity, topic, key, payload and when it was written. */
export interface CreatedMessage {
  id: number;
  publicId: string;
  topic: string;
  key: string | null;
  status: OutboxStatus;
  payload: unknown;
  /** outbox.created_at as the claim reads it (epoch ms), so a republished event carries the same time. */
  createdAt: Date;
}

export interface CreatedBetween {
  /** Inclusive. */
  since: Date;
  /** Exclusive: the window is half-open, [since, until). */
  until: Date;
  topics: readonly string[];
  /** Internal id of the last row of the previous page (0 for the first page). */
  afterId: number;
  limit: number;
}

/** $1 after id, $2 since, $3 until, $4 the topics, $5 the limit. */
const CREATED_BETWEEN = statement(
  'outbox-messages-created-between',
  `select id, public_id, topic, key, status, payload,
          (extract(epoch from created_at) * 1000)::float8 as created_at_ms
     from outbox
    where id > $1
      and created_at >= $2::timestamptz
      and created_at < $3::timestamptz
      and topic = any($4::text[])
      and lane is null -- a lane message is its original's work, not an event of its own
    order by id
    limit $5`,
);

/**
 * Messages written in [since, until) of the given topics, oldest first, whatever their status:
 * a DONE or DEAD row's event is still a fact (backfilling the event log reads exactly the
 * messages that are settled). Keyset pagination on the internal id, ascending, so the pages come
 * in the order the rows were written, which is the per-key order the worker keeps.
 *
 * There is no index on created_at, on purpose: every business write would pay for it, and this query is
 * an operator's rare command. Each page walks the primary key from `afterId` until it has `limit`
 * matches, so a whole backfill reads the table once, and the purge of old DONE rows bounds it.
 * created_at is the writing transaction's start, so it is not strictly monotonic in id: that is why
 * the window is a filter, not a range of ids.
 */
export async function messagesCreatedBetween(db: Db, f: CreatedBetween): Promise<CreatedMessage[]> {
  if (f.topics.length === 0) return [];
  const rows = await run<{
    id: string;
    public_id: string;
    topic: string;
    key: string | null;
    status: OutboxStatus;
    payload: unknown;
    created_at_ms: number;
  }>(executorOf(db), CREATED_BETWEEN, [f.afterId, f.since.toISOString(), f.until.toISOString(), f.topics, f.limit]);
  return rows.map((r) => ({
    id: Number(r.id),
    publicId: r.public_id,
    topic: r.topic,
    key: r.key,
    status: r.status,
    payload: r.payload,
    createdAt: new Date(r.created_at_ms),
  }));
}
