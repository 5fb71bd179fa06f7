import { execute, statement, type Executor } from './executor.ts';
import { fence } from './lease/leased-table.ts';
import { ASYNC_COMMIT, floatArray, intArray, textArray } from './sql.ts';
import { OUTBOX } from './lease/outbox-table.ts';

/*
 * Handler lanes: per-(key, handler) order for the handlers that ask for it.
 *
 * Per-key order is per message: the next message of a key is not claimed while an older one is
 * PENDING. That is what keeps an order's cancellation email behind its confirmation. But it also
 * means that one handler failing holds up every OTHER handler's later work of the key: while
 * NATS was down, a cancellation's emails waited behind the relay retries of the order's creation
 * event, for up to the whole retry span. One downstream's outage must not delay another's effects.
 *
 * A handler that sets `ownLane` (the events relay) keeps its own order instead:
 *
 * - When it fails on a message that has a key, the message does not retry for it. Its work is
 *   moved into a lane message: a new outbox row with the same topic, payload and creation time,
 *   `lane` = the handler, `origin_id` = the original's public id (what the handler sees as the
 *   message id, so the relay's Nats-Msg-Id stays the event's), and the key `<handler>@<key>`. The
 *   original counts the handler as done and settles as if it had succeeded: its other handlers'
 *   later messages of the key are no longer held.
 * - The lane message is an ordinary outbox message: claimed, leased, retried with backoff, DEAD
 *   after its last attempt with the error kept, requeued by an admin. It runs only its handler,
 *   and its key orders it behind the earlier work of that handler for that key, and nothing else.
 * - While a key's lane for the handler holds work (not DONE or DEAD), the handler's work of the
 *   key's LATER messages goes into the lane too, without running first: the claim reports the busy
 *   lanes (src/outbox/claim.ts). So the handler still sees the key's events in order, and an
 *   event never overtakes an earlier one that is waiting in the lane.
 *
 * Why this is safe: lane rows of a key are written only while a message of that key is held (the
 *   write is fenced on its claim), and messages of a key are held one at a time, so lane rows are
 *   written in the key's order and nothing can add one between the claim's check and the write. A
 *   lane row written by a worker whose claim was superseded is not written at all (the fence).
 * What it costs: nothing on the happy path but the claim's probe (one index probe per claimed
 *   message with a key, only when a handler asks for a lane), and one statement per deferral.
 *
 * The deferral happens on the first failure: the lane message is due after the first backoff
 * step and carries the attempt and the error; after a postponement (the handler's downstream away,
 * DependencyUnavailableError) it carries no attempt and is due after the postponement's wait.
 * Messages without a key have no order to keep: they retry, or are postponed, as a whole.
 */

/** Work of one handler moved into its lane. */
export interface Deferral {
  handler: string;
  /** When the lane message is due: after a failure, the first backoff step; after a postponement, its wait; otherwise 0. */
  delaySeconds: number;
  /** 1 when the handler ran and failed (the attempt counts), 0 when it was postponed or waited for its lane. */
  attempts: number;
  /** The failure, as recorded ("handler: ErrorClass: message"), or null. */
  error: string | null;
}

/*
 * One statement, so the original's bookkeeping and its lane rows commit together or not at all.
 * The update is fenced on the claim (a superseded claim writes no lane row) and refuses a handler
 * already counted done: a deferral written twice (a retried write whose first answer was lost)
 * cannot create a second lane row. The lane rows keep the original's creation time: their age is
 * the event's.
 */
const DEFER = statement(
  'outbox-defer-to-lane',
  `with m as (
     update outbox
        set handlers_done = handlers_done || $3::text[]
       from ${ASYNC_COMMIT}
      where ${fence(OUTBOX, undefined, '$1', '$2::uuid')} and key is not null
        and not (handlers_done && $3::text[])
     returning public_id, topic, key, payload, created_at, traceparent, tracestate
   ), lane as (
     insert into outbox (topic, key, payload, lane, origin_id, created_at, available_at, attempts, last_error, traceparent, tracestate)
     select m.topic, d.handler || '@' || m.key, m.payload, d.handler, m.public_id, m.created_at,
            now() + make_interval(secs => d.delay), d.attempts, d.error, m.traceparent, m.tracestate
       from m, unnest($3::text[], $4::float8[], $5::int[], $6::text[]) as d(handler, delay, attempts, error)
     returning 1
   )
   select (select count(*) from m)::int as held, (select count(*) from lane)::int as written`,
);

/**
 * Moves the deferred handlers' work of message `id` into their lanes, under its claim. False when
 * the claim is no longer held (nothing was written).
 */
export async function deferToLanes(q: Executor, id: number, claimId: string, deferrals: readonly Deferral[]): Promise<boolean> {
  const res = await execute<{ held: number; written: number }>(q, DEFER, [
    id,
    claimId,
    textArray(deferrals.map((d) => d.handler)),
    floatArray(deferrals.map((d) => d.delaySeconds)),
    intArray(deferrals.map((d) => d.attempts)),
    textArray(deferrals.map((d) => d.error)),
  ]);
  return (res.rows[0]?.held ?? 0) > 0;
}

/**
 * The key a lane message's original was written with: a lane message is keyed
 * `<handler>@<key>` (deferToLanes above, and the claim's lane probe in claim.ts), its `lane`
 * being the handler. Any other message's key is its own.
 */
export function keyAsWritten(key: string | null, lane: string | null): string | null {
  return lane !== null && key !== null ? key.slice(lane.length + 1) : key;
}
