import { run, runArrays, statement, type Executor } from './executor.ts';
import { dueNow, takeLease } from './lease/leased-table.ts';
import { intArray, notAfter, notAhead, notBefore, textArray } from './sql.ts';
import { OUTBOX } from './lease/outbox-table.ts';

/**
 * A claimed message, built straight from its row: what the worker dispatches. Read-only: the
 * worker keeps its own bookkeeping (lease extensions, handler timings) beside it, not on it.
 */
export class ClaimedMessage {
  constructor(
    readonly id: number,
    readonly publicId: string,
    readonly topic: string,
    readonly key: string | null,
    readonly payload: unknown,
    /** This claim included: the first delivery is attempt 1. */
    readonly attempts: number,
    /** Handlers that already succeeded on an earlier attempt: they are not run again. */
    readonly handlersDone: readonly string[],
    /** The fencing token of this claim: every settle is `WHERE id = … AND claim_id = token`. */
    readonly claimId: string,
    /**
     * When the claim's lease ends, on the local clock, counted from when the claim was SENT (so
     * never later than the database's deadline). The heartbeat extends it (src/outbox/runner/heartbeat.ts).
     */
    readonly leaseUntilMs: number,
    /** When the message was written (outbox.created_at), epoch ms: the event's time for the relay. */
    readonly createdAtMs: number,
    /**
     * The id its handlers see: the public id, or for a lane message its original's, so a handler's
     * idempotency (the relay's Nats-Msg-Id) is the event's wherever its work runs.
     */
    readonly eventId: string,
    /** For a lane message, the one handler it runs (src/outbox/lanes.ts); null for a message as written. */
    readonly lane: string | null,
    /** Own-lane handlers whose lane of this key still holds work: this message's work for them queues behind it. */
    readonly lanesBusy: readonly string[],
    /** The W3C trace context stored by the producer (src/outbox/enqueue.ts); null when tracing was off. */
    readonly traceparent: string | null = null,
    readonly tracestate: string | null = null,
    /** Its topic's priority (higher first): the worker's local queue keeps a batch's order by it. */
    readonly priority: number = 0,
  ) {}
}

const NONE: readonly string[] = Object.freeze([]);

/*
 * Claiming: one statement, so one short transaction, and no transaction stays open while a
 * handler runs (a handler may talk to SMTP for seconds; a transaction open that long would hold
 * row locks, pin a connection and hold back vacuum).
 *
 * - `status = 'PENDING' AND available_at <= now()`: available_at is the creation time of a new
 *   message and the backoff deadline of a failed one. `leased_until`, checked on the row: a
 *   claimed message is not due again until its worker's lease runs out (the worker died). So "due"
 *   means new, or done backing off, and not held. DONE rows never enter either index below.
 *
 * - The order (ADR 0033): two walks, each through its own partial index, each already in its order
 *   and stopping at its limit, so neither sorts nor reads the other's rows.
 *   `aged`: messages without a turn (retried, postponed, lane work, rows written without one),
 *   oldest first, through outbox_pending_available_idx (available_at, id) WHERE PENDING AND turn IS
 *   NULL: an index range that ends at now(), so a backlog that is backing off is not read. They go
 *   first: they have waited their backoff already, and under a flood of first deliveries they
 *   would otherwise wait for the flood.
 *   `turns`: first deliveries, through outbox_pending_turn_idx (priority desc, turn, id) WHERE
 *   PENDING AND turn IS NOT NULL, for what the first walk left of the limit. A higher priority (a
 *   topic's, registered by the application) is claimed before any lower one; within a priority the
 *   lowest turn first. Turns are given when a message is written (outbox_turn, migrations/0015):
 *   a group's messages are one turn apart, and so are an owner's (ADR 0039), and a group and owner
 *   with nothing waiting start at the head, so groups and owners take turns, one message each,
 *   however many one of them wrote or through however many groups. Every such row is due
 *   when written (its available_at is its creation time); the check stays for the one that is not.
 *   The order is only ever an order: the walks take whatever is due, so a lone flood still drains
 *   at full speed.
 *
 * - `FOR UPDATE SKIP LOCKED`: FOR UPDATE so two workers claiming at the same moment cannot both
 *   take a row; SKIP LOCKED so the second steps over rows the first is claiming and takes the
 *   next ones instead of waiting for the first one's transaction (which would make a second
 *   worker add nothing). If a row changed between our snapshot and our lock (someone claimed and
 *   committed it), Postgres re-checks the WHERE against the new version: its leased_until is now
 *   in the future, so it is dropped, never claimed twice.
 *
 * - Per-key order: a message is not due while an older message with the same key is still
 *   PENDING, whether that one is new, backing off or leased. So at most one message of a key is
 *   ever in flight, and an order's cancellation email waits for its confirmation email. DEAD
 *   does not block its key (it has stopped being retried; holding the key hostage would stop
 *   every later event of that order). Messages without a key (null) are not ordered. The check
 *   compares ids, the order of writing, whatever the claim's order: a message of a higher priority
 *   or an earlier turn still waits for an older message of its key (ADR 0033). One probe
 *   of outbox_key_idx (key, id), over that key's live rows: the index is partial on these very
 *   words, so a DONE writes no entry into it (migrations/0010, ADR 0023). `not in ('DONE',
 *   'DEAD')` means PENDING (the CHECK allows three values), written so on purpose: `= 'PENDING'`
 *   would let the planner serve the check from the claim's partial index, which stale statistics
 *   make look empty, and it then scanned that index whole for each row (migrations/0003). The
 *   check is a subquery of its own (`offset 0` keeps the planner from turning it into a join),
 *   and `(e.key, e.id) < (o.key, o.id)` is a condition only the (key, id) index can serve: so,
 *   with the claim connection's settings, a probe of that index by key is its only plan. As a
 *   join, a cached plan made on a tiny outbox scanned the whole table per candidate row instead.
 *
 * - Handler lanes ($4, the names of the handlers that keep their own lane, src/outbox/lanes.ts):
 *   for each claimed message as written, which of those handlers still have work of its key
 *   waiting in their lane (rows keyed `<handler>@<key>`, not DONE or DEAD). Its work for them then
 *   goes into the lane behind that work instead of running. One probe of outbox_key_idx per such
 *   handler (the one-handler case, the relay's, is written out: on 20,000 keyed messages claimed
 *   500 at a time it added 0.5 ms to a claim of about 11 ms, where the array form added 4 ms),
 *   and none at all when $4 is empty (no handler asks for a lane: the relay is off) or the
 *   message has no key.
 *
 * - The days: the outbox is partitioned by day of created_at (src/outbox/partitions.ts). Every
 *   part of this statement says `created_at < now() + 1 day` (notAhead), which PostgreSQL evaluates
 *   when the statement starts, so the empty days made ahead are left out before it runs. The days
 *   kept for the retention stay in: their rows are DONE, so their partial indexes (the walks', the
 *   key check's) hold next to nothing and each probe there ends at once.
 *   It once also skipped those days, by reading first the span of created_at still holding
 *   PENDING rows and pruning the partitions outside it while it ran. PostgreSQL 18 crashes on
 *   that: when FOR UPDATE meets a row another claim has just changed, it re-checks the row
 *   (EvalPlanQual) and builds the statement's plan again for it, and a partition pruned by a
 *   value computed inside the statement corrupts the server's memory there (a segfault in
 *   ExecInitPartitionExecPruning, or "pfree called with invalid pointer"; every connection is
 *   then reset). Pruning only on what is known when the statement starts (now(), parameters) is
 *   safe. What skipping those days saved: about 7 % of a claim of 500 with a week of DONE history
 *   (ADR 0019); test/integration/outbox/claim-recheck.test.ts races claims into that re-check.
 *
 * - The lease: leased_until moves to now() + lease, which hides the row from every other claim
 *   until then. A worker that dies needs no cleanup: the lease simply ends.
 *
 * - Why the lease is not in available_at (ADR 0022): available_at is a key of the claim's index,
 *   and an UPDATE that changes an indexed column writes a new entry into every index of the
 *   partition (five). The columns this UPDATE sets are in no index, and the partition keeps free
 *   room on its pages (fillfactor 40, migrations/0009), so it is a HOT update: the new row
 *   version goes on the same page and no index is written. What it costs: a held message keeps its
 *   place at the head of the index, and each claim steps over the held ones (a look at the row
 *   each, no write) until their DONE. On the drain floor that costs far less than the index
 *   entries saved: 38,008 msg/s against 28,867.
 *
 * - attempts + 1 at claim time, not at failure time: a message that kills its worker every time
 *   (out of memory, segfault in a native module) still counts its attempts and reaches DEAD.
 *
 * - claim_id: a fresh uuid per claim. A worker that outlived its lease (paused, network cut) may
 *   come back and try to settle; the fence `claim_id = $token` makes its update match nothing
 *   once another worker has claimed the row since.
 */
/** No older message of its key is still live (the per-key check above). */
const keyIsFree = (alias: string) => `not exists (
             select 1 from outbox e
              where e.key = ${alias}.key and (e.key, e.id) < (${alias}.key, ${alias}.id) and e.status not in ('DONE', 'DEAD')
                and ${notAhead('e')}
             offset 0)`;

/**
 * What follows the choice, for both claims: the lease taken on the chosen rows (`chosen`, a
 * subquery of ids; `where`, more conditions on the row, the days it may be in), and the rows
 * returned in claim order with the lanes their work queues behind.
 */
const leaseAndReturn = (chosen: string, where: string) => `claimed as (
    update outbox
       set ${takeLease(OUTBOX, 'outbox', '$2::uuid', '$3::float8')}, claimed_at = now()
     where outbox.id = any(array(${chosen}))
       and ${notAhead('outbox')}${where}
    returning outbox.id, outbox.public_id, outbox.topic, outbox.key, outbox.payload, outbox.attempts,
              outbox.handlers_done, outbox.created_at, outbox.lane, outbox.origin_id, outbox.traceparent, outbox.tracestate,
              outbox.priority, outbox.turn
  )
  select c.id::float8, c.public_id, c.topic, c.key, c.payload, c.attempts, nullif(c.handlers_done, '{}'),
         (extract(epoch from c.created_at) * 1000)::float8, c.lane, c.origin_id,
         case when c.key is null or c.lane is not null or cardinality($4::text[]) = 0 then null
              when cardinality($4::text[]) = 1 then
                   case when exists (select 1 from outbox l
                                      where l.key = ($4::text[])[1] || '@' || c.key and l.status not in ('DONE', 'DEAD')
                                        and ${notAhead('l')}
                                     offset 0)
                        then $4::text[] end
              else nullif(array(select h from unnest($4::text[]) h
                                 where exists (select 1 from outbox l
                                                where l.key = h || '@' || c.key and l.status not in ('DONE', 'DEAD')
                                                  and ${notAhead('l')}
                                               offset 0)), '{}')
         end,
         c.traceparent, c.tracestate, c.priority
    from claimed c
   order by c.priority desc, c.turn nulls first, c.id`;

/** The walk of messages without a turn, oldest first, the claim's first (above). */
const AGED = `aged as (
    select o.id
      from outbox o
     where ${dueNow(OUTBOX, 'o')} and o.turn is null
       and ${notAhead('o')}
       and ${keyIsFree('o')}
     order by o.available_at, o.id
     limit $1
       for update skip locked
  )`;

export const CLAIM_SQL = `
  with ${AGED}, turns as (
    select o.id
      from outbox o
     where ${dueNow(OUTBOX, 'o')} and o.turn is not null
       and ${notAhead('o')}
       and ${keyIsFree('o')}
     order by o.priority desc nulls last, o.turn, o.id
     limit $1 - (select count(*) from aged)
       for update skip locked
  ), ${leaseAndReturn('select id from aged union all select id from turns', '')}`;

/** Its name as a prepared statement (node-postgres prepares it once per connection). */
export const CLAIM_STATEMENT = 'outbox-claim-v9';
export const CLAIM = statement(CLAIM_STATEMENT, CLAIM_SQL);

/*
 * The claim of messages the worker was told about: the rows whose commits notified it, by id
 * (src/outbox/runner/waits.ts keeps them; src/outbox/channel.ts says what a notification carries).
 * Each is one probe of its day's primary key, pruned to the days between the oldest and the newest
 * given (a second wider each way), then the same checks as a walk's row (due, not held, no older
 * message of its key live) and the same lease. It reads no pending index, so its cost does not
 * grow with what a snapshot held open keeps there (ADR 0058). It takes only the rows given: the
 * loop asks for it only when everything else due was taken by the walk before (loop.ts).
 */
const CLAIM_IDS_SQL = `
  with chosen as (
    select o.id
      from outbox o
     where o.id = any($1::bigint[]) and o.created_at between $5::timestamptz and $6::timestamptz
       and ${dueNow(OUTBOX, 'o')}
       and ${notAhead('o')}
       and ${keyIsFree('o')}
       for update skip locked
  ), ${leaseAndReturn('select id from chosen', ' and outbox.created_at between $5::timestamptz and $6::timestamptz')}`;

export const CLAIM_IDS = statement('outbox-claim-ids-v1', CLAIM_IDS_SQL);

/*
 * The poll's claim between its full walks (src/outbox/runner/poll-walks.ts, ADR 0059): the first
 * walk alone, through outbox_pending_available_idx. What time makes due without a wake-up is
 * there: a retry whose backoff ended, a postponed message, lane work. Its index range ends at now()
 * and holds no first delivery, so the entries a snapshot held open keeps for the messages finished
 * under it are not in its way; the second walk's index holds them all.
 */
export const CLAIM_AGED = statement(
  'outbox-claim-aged-v1',
  `
  with ${AGED}, ${leaseAndReturn('select id from aged', '')}`,
);

/*
 * Whether any of these keys has a message still live: after its messages were settled, the next
 * message of a key may be due (the per-key check above), and the idle worker claims only if one
 * is there (src/outbox/runner/loop.ts untilDue). One probe of outbox_key_idx per key and day; `=
 * any` of the keys, with the claim connection's settings, can be served by no other index.
 */
const LATER_OF_KEYS = statement(
  'outbox-later-of-keys',
  `select exists (select 1 from outbox e
                   where e.key = any($1::text[]) and e.status not in ('DONE', 'DEAD')
                     and ${notAhead('e')}) as later`,
);

export async function laterOfKeys(q: Executor, keys: readonly string[]): Promise<boolean> {
  const rows = await run<{ later: boolean }>(q, LATER_OF_KEYS, [textArray(keys)]);
  return rows[0]!.later;
}

export interface ClaimOptions {
  limit: number;
  leaseSeconds: number;
  claimId: string;
  /** The handlers that keep their own lane (HandlerRegistry.ownLanes()); none by default. */
  lanes?: readonly string[];
}

/*
 * Where the claim runs: src/outbox/claim-connection.ts, a connection of its own whose session
 * settings the claim relies on: its plan is made once and cached, and the settings leave that plan
 * one shape whatever the statistics; its commit is asynchronous there (a claim a database crash
 * loses only makes its messages due again, src/outbox/sql.ts).
 *
 * `id = any(array(select id from due))`, not `from due where id = due.id`: with the join, the
 * planner estimated a hash join and read the WHOLE table (DONE history included) on every claim to
 * update 500 rows (70 ms of 250 on 20,000 rows, growing with the history); with the array it is
 * 500 primary-key lookups.
 *
 * The rows come back as arrays, in claim order, highest priority first (UPDATE … RETURNING keeps no
 * order, the outer select does), each turned into one ClaimedMessage: no row object, no second pass. An id fits a float8
 * exactly up to 2^53. Empty handlers_done comes back as null, so the common case parses no array.
 *
 * claimOn claims up to `limit` due messages on `q`, a connection with those settings (or a pool
 * of them).
 */
export function claimOn(q: Executor, opts: ClaimOptions): Promise<ClaimedMessage[]> {
  return walkOn(q, CLAIM, opts);
}

/** Claims up to `limit` due messages without a turn (CLAIM_AGED above), on `q` as claimOn does. */
export function claimAgedOn(q: Executor, opts: ClaimOptions): Promise<ClaimedMessage[]> {
  return walkOn(q, CLAIM_AGED, opts);
}

async function walkOn(q: Executor, walk: typeof CLAIM, opts: ClaimOptions): Promise<ClaimedMessage[]> {
  if (!Number.isInteger(opts.limit) || opts.limit < 1) throw new Error(`claim limit must be a positive integer, got ${opts.limit}`);
  const leaseUntilMs = leaseFrom(opts.leaseSeconds);
  const rows = await runArrays(q, walk, [opts.limit, opts.claimId, opts.leaseSeconds, textArray(opts.lanes ?? NONE)]);
  return claimedFrom(rows, opts.claimId, leaseUntilMs);
}

/** A message the worker was told about: its id and its created_at (epoch ms), from its public id. */
export interface NotifiedMessage {
  id: number;
  createdAtMs: number;
}

/**
 * Claims the given messages that are due (CLAIM_IDS above), on `q` as claimOn does; the rest are
 * left as they are. At most as many as given, in claim order.
 */
export async function claimIdsOn(
  q: Executor,
  messages: readonly NotifiedMessage[],
  opts: Omit<ClaimOptions, 'limit'>,
): Promise<ClaimedMessage[]> {
  if (messages.length === 0) return [];
  const leaseUntilMs = leaseFrom(opts.leaseSeconds);
  let oldest = Infinity;
  let newest = -Infinity;
  for (const m of messages) {
    oldest = Math.min(oldest, m.createdAtMs);
    newest = Math.max(newest, m.createdAtMs);
  }
  const rows = await runArrays(q, CLAIM_IDS, [
    intArray(messages.map((m) => m.id)),
    opts.claimId,
    opts.leaseSeconds,
    textArray(opts.lanes ?? NONE),
    notBefore(oldest),
    notAfter(newest),
  ]);
  return claimedFrom(rows, opts.claimId, leaseUntilMs);
}

/** The claim's local deadline, counted from now (before the claim is sent). */
function leaseFrom(leaseSeconds: number): number {
  if (!Number.isFinite(leaseSeconds) || leaseSeconds <= 0)
    throw new Error(`lease must be a positive number of seconds, got ${leaseSeconds}`);
  return Date.now() + leaseSeconds * 1000;
}

function claimedFrom(rows: unknown[][], claimId: string, leaseUntilMs: number): ClaimedMessage[] {
  const out = new Array<ClaimedMessage>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    out[i] = new ClaimedMessage(
      r[0] as number,
      r[1] as string,
      r[2] as string,
      r[3] as string | null,
      r[4],
      r[5] as number,
      (r[6] as string[] | null) ?? NONE,
      claimId,
      leaseUntilMs,
      r[7] as number,
      (r[9] as string | null) ?? (r[1] as string),
      r[8] as string | null,
      (r[10] as string[] | null) ?? NONE,
      r[11] as string | null,
      r[12] as string | null,
      r[13] as number,
    );
  }
  return out;
}
