import type pg from 'pg';
import type { Logger } from '../logger.ts';
import { execute, statement, type Executor, type Statement } from './executor.ts';
import type { ClaimedMessage } from './claim.ts';
import { bringDaysIntoSight, markDoneInSight } from './days-in-sight.ts';
import type { PlannedConnection } from './planned-connection.ts';
import { DoneBatcher } from './done-batch.ts';
import { deferToLanes } from './lanes.ts';
import { retryWrite } from './retry-write.ts';
import { batchFence, fence, release } from './lease/leased-table.ts';
import { ASYNC_COMMIT, intArray, notAfter, notBefore, textArray, uuidArray } from './sql.ts';
import { OUTBOX } from './lease/outbox-table.ts';
import type { LaneDeferral, OutcomeSink, Verdict } from './types.ts';

/*
 * Settling a claimed message: recording its outcome. The Settler below turns a verdict
 * (src/outbox/runner/verdict.ts) into one of these statements, or hands a deferral to
 * src/outbox/lanes.ts (the original's handler counted done and its lane rows, one statement);
 * nothing else in the worker updates a claimed row except the lease verbs (src/outbox/lease.ts).
 *
 * Every statement here is one autocommitted
 * UPDATE, so each message's outcome is committed on its own: one message's failure never rolls
 * back another's finished work. Commits are asynchronous (see src/outbox/sql.ts for what a
 * database crash can then cause: a redelivery, never a loss).
 *
 * Every one is fenced: `WHERE id = $id AND claim_id = $token AND status = 'PENDING'`. A worker
 * whose lease ran out while it was still working (a long GC pause, a cut network) may come back
 * after another worker claimed the same row; its update then matches nothing and the newer
 * claim's outcome stands. Each function says whether it still held the claim, per (id, claim).
 *
 * The lease verbs (extend, hand back) are in src/outbox/lease.ts.
 */

const FENCE = fence(OUTBOX, undefined, '$1', '$2::uuid');
const RELEASE = release(OUTBOX);

async function fenced(q: Executor, s: Statement, values: unknown[]): Promise<boolean> {
  const res = await execute(q, s, values);
  return (res.rowCount ?? 0) > 0;
}

const HANDLER_DONE = statement(
  'outbox-handler-done',
  `update outbox
      set handlers_done = case when $3 = any(handlers_done) then handlers_done
                               else array_append(handlers_done, $3::text) end
     from ${ASYNC_COMMIT}
    where ${FENCE}`,
);

/**
 * Records one handler's success as soon as it finishes, before the next handler of the same
 * message runs: if the worker dies between two handlers, the redelivery runs only the ones not
 * recorded here. (The last handler's success is recorded with DONE, in the same write.)
 */
export function recordHandlerDone(q: Executor, id: number, claimId: string, handler: string): Promise<boolean> {
  return fenced(q, HANDLER_DONE, [id, claimId, handler]);
}

export interface DoneItem {
  id: number;
  claimId: string;
  /** The handler whose success completes the message, recorded in the same write (or null). */
  lastHandler: string | null;
  /** The message's created_at (ClaimedMessage.createdAtMs): which day's partition holds it. */
  createdAtMs?: number;
}

export const MARK_DONE = statement(
  'outbox-mark-done-v2',
  `update outbox o
     set status = 'DONE', processed_at = now(), ${RELEASE},
         handlers_done = case when v.handler is null or v.handler = any(o.handlers_done) then o.handlers_done
                              else array_append(o.handlers_done, v.handler) end
    from unnest($1::bigint[], $2::uuid[], $3::text[]) with ordinality as v(id, claim_id, handler, n),
         ${ASYNC_COMMIT}
   where ${batchFence(OUTBOX, 'o', 'v')}
     and o.created_at between $4::timestamptz and $5::timestamptz
  returning v.n`,
);

/**
 * Marks messages DONE, one message or many in one UPDATE: each row fenced on its own claim.
 * Returns, per item and in order, whether that (id, claim) was still held: the match is on the
 * pair, so a worker that somehow holds two claims of one message learns about each separately.
 */
export async function markDoneMany(q: Executor, items: readonly DoneItem[]): Promise<boolean[]> {
  const n = items.length;
  const ids = new Array<number>(n);
  const claims = new Array<string>(n);
  const handlers = new Array<string | null>(n);
  let oldest = Infinity;
  let newest = -Infinity;
  for (let i = 0; i < n; i++) {
    const it = items[i]!;
    ids[i] = it.id;
    claims[i] = it.claimId;
    handlers[i] = it.lastHandler;
    oldest = Math.min(oldest, it.createdAtMs ?? -Infinity);
    newest = Math.max(newest, it.createdAtMs ?? Infinity);
  }
  const res = await execute<{ n: string }>(q, MARK_DONE, [
    intArray(ids),
    uuidArray(claims),
    textArray(handlers),
    notBefore(oldest),
    notAfter(newest),
  ]);
  const held = new Array<boolean>(n).fill(false);
  for (const r of res.rows) held[Number(r.n) - 1] = true;
  return held;
}

/** Every handler has succeeded: one message, one fenced write. */
export async function markDone(q: Executor, id: number, claimId: string, lastHandler?: string): Promise<boolean> {
  return (await markDoneMany(q, [{ id, claimId, lastHandler: lastHandler ?? null }]))[0]!;
}

const RETRY = statement(
  'outbox-retry',
  `update outbox
      set available_at = now() + make_interval(secs => $3), turn = null, ${RELEASE}, last_error = $4
     from ${ASYNC_COMMIT}
    where ${FENCE}`,
);

/**
 * A transient failure: back to waiting, due again after `delaySeconds`: available_at holds the
 * backoff deadline, and the lease is released in the same write. The turn goes (here, and after a
 * postponement or an unknown topic): the message is then claimed by its deadline, beside the
 * first deliveries, not at a turn it has had (ADR 0033).
 */
export function scheduleRetry(q: Executor, id: number, claimId: string, delaySeconds: number, lastError: string): Promise<boolean> {
  return fenced(q, RETRY, [id, claimId, delaySeconds, lastError]);
}

const POSTPONE = statement(
  'outbox-postpone',
  `update outbox
      set attempts = greatest(attempts - 1, 0), available_at = now() + make_interval(secs => $3), turn = null,
          ${RELEASE}, last_error = $4
     from ${ASYNC_COMMIT}
    where ${FENCE}`,
);

/**
 * A handler's downstream is unavailable (DependencyUnavailableError): back to waiting like a
 * retry, but the attempt the claim counted is given back, as for an unknown topic. So an outage
 * of a day leaves the message PENDING, never DEAD, and its attempts still count only the failures
 * that were its own. `last_error` says what it waits for.
 */
export function postpone(q: Executor, id: number, claimId: string, delaySeconds: number, lastError: string): Promise<boolean> {
  return fenced(q, POSTPONE, [id, claimId, delaySeconds, lastError]);
}

const DEAD = statement(
  'outbox-dead',
  `update outbox
      set status = 'DEAD', processed_at = now(), ${RELEASE}, last_error = $3
     from ${ASYNC_COMMIT}
    where ${FENCE}`,
);

/** Out of attempts, or a failure no retry can fix. Kept, with its last error, for a person to look at. */
export function markDead(q: Executor, id: number, claimId: string, lastError: string): Promise<boolean> {
  return fenced(q, DEAD, [id, claimId, lastError]);
}

const UNKNOWN_TOPIC = statement(
  'outbox-unknown-topic',
  `update outbox
      set attempts = greatest(attempts - 1, 0), ${RELEASE},
          available_at = now() + make_interval(secs => $3), turn = null
     from ${ASYNC_COMMIT}
    where ${FENCE}`,
);

/**
 * No handler is registered for the topic. Not a failure (no amount of retrying grows a handler;
 * usually a producer deployed ahead of its consumer), so the attempt the claim counted is given
 * back, and the message is looked at again after `recheckSeconds` rather than on every poll.
 */
export function releaseUnknownTopic(q: Executor, id: number, claimId: string, recheckSeconds: number): Promise<boolean> {
  return fenced(q, UNKNOWN_TOPIC, [id, claimId, recheckSeconds]);
}

/** What happened to the message as a whole. 'lost' = our claim was superseded (lease ran out) or not recorded. */
export type MessageOutcome = 'done' | 'retry' | 'postpone' | 'dead' | 'unknown_topic' | 'lost';

/**
 * Records verdicts: DONE through the group commit (src/outbox/done-batch.ts: one UPDATE for
 * everything that finished together), retry, postpone, dead and unknown-topic each as its own fenced UPDATE
 * (rare, and each carries its own error text or delay), and a handler's success between two
 * handlers of one message. Reports each outcome once it is recorded (src/outbox/runner/outcomes.ts).
 */
export class Settler {
  private readonly done: DoneBatcher<DoneItem>;

  constructor(
    private readonly pool: pg.Pool,
    /** Where the DONE batches are written: the worker's settle connection (planned-connection.ts says why). */
    settleConnection: PlannedConnection,
    private readonly log: Logger,
    private readonly reporter: OutcomeSink,
    private readonly unknownTopicRecheckSeconds: number,
    /** A line at info per message done (a person watching a terminal); otherwise only the per-minute progress line. */
    private readonly logEachMessage = false,
  ) {
    // A DONE that finds no row is tried again once its day is in sight (src/outbox/days-in-sight.ts).
    this.done = new DoneBatcher((items) =>
      markDoneInSight(pool, items, (some) => settleConnection.use((client) => markDoneMany(client, some)), log),
    );
  }

  /**
   * A handler succeeded and another handler of the message runs next: recorded now, so a worker
   * that dies in between does not run this one again. False: not recorded (claim superseded, or
   * the database unreachable); the message is no longer ours to carry on with.
   */
  async handlerDone(msg: ClaimedMessage, handler: string, durationMs: number): Promise<boolean> {
    let held: boolean;
    try {
      held = await this.inSight(msg, () => retryWrite(() => recordHandlerDone(this.pool, msg.id, msg.claimId, handler)));
    } catch (err) {
      this.log.error(
        { err, messageId: msg.publicId, handler },
        "could not record a handler's success; the lease will bring the message back",
      );
      return false;
    }
    if (!held) {
      this.log.warn({ messageId: msg.publicId, handler }, 'claim superseded (lease expired); leaving the message to its new claim');
      return false;
    }
    if (this.reporter.wants('done')) {
      this.reporter.outcome({ messageId: msg.publicId, topic: msg.topic, handler, attempt: msg.attempts, outcome: 'done', durationMs });
    }
    return true;
  }

  /**
   * Own-lane handlers' work moved into their lanes (src/outbox/lanes.ts), before the message's
   * verdict is recorded. Not retried on error: the write refuses a second deferral of a handler,
   * so a retry whose first answer was lost would read as a lost claim anyway; the lease brings the
   * message back and, if the write did commit, the deferred handlers are not run again.
   */
  async deferToLanes(msg: ClaimedMessage, deferrals: readonly LaneDeferral[]): Promise<boolean> {
    let held: boolean;
    try {
      held = await deferToLanes(this.pool, msg.id, msg.claimId, deferrals);
    } catch (err) {
      this.log.error(
        { err, messageId: msg.publicId },
        "could not move handlers' work into their lanes; the lease will bring the message back",
      );
      return false;
    }
    if (!held) {
      this.log.warn({ messageId: msg.publicId }, 'claim superseded (lease expired); leaving the message to its new claim');
      return false;
    }
    for (const d of deferrals) {
      if (d.error === null) continue;
      // The handler is retried in its lane: after a failure of its own (an attempt), or postponed.
      this.reporter.outcome({
        messageId: msg.publicId,
        topic: msg.topic,
        handler: d.handler,
        attempt: msg.attempts,
        outcome: d.attempts > 0 ? 'retry' : 'postponed',
        durationMs: d.durationMs,
        error: d.error,
      });
    }
    return true;
  }

  /** Records the verdict (null: the claim was already lost) and says what became of the message. */
  async settle(msg: ClaimedMessage, verdict: Verdict | null): Promise<MessageOutcome> {
    if (verdict === null) return 'lost';
    let held: boolean;
    try {
      // DONE goes into the group commit, which retries its own statement.
      held =
        verdict.kind === 'done'
          ? await this.done.add({ id: msg.id, claimId: msg.claimId, lastHandler: verdict.handler, createdAtMs: msg.createdAtMs })
          : await this.inSight(msg, () => retryWrite(() => this.write(msg, verdict)));
    } catch (err) {
      this.log.error(
        { err, messageId: msg.publicId, outcome: verdict.kind },
        'could not record the outcome; the lease will bring the message back',
      );
      return 'lost';
    }
    if (!held) {
      this.log.warn({ messageId: msg.publicId }, 'claim superseded (lease expired); leaving the message to its new claim');
      return 'lost';
    }
    this.report(msg, verdict);
    return verdict.kind;
  }

  /** `write`, and once more if it found no row, after the message's day is brought into sight (src/outbox/days-in-sight.ts). */
  private async inSight(msg: ClaimedMessage, write: () => Promise<boolean>): Promise<boolean> {
    if (await write()) return true;
    await bringDaysIntoSight(this.pool, [msg.createdAtMs], this.log);
    return write();
  }

  private write(msg: ClaimedMessage, verdict: Exclude<Verdict, { kind: 'done' }>): Promise<boolean> {
    switch (verdict.kind) {
      case 'retry':
        return scheduleRetry(this.pool, msg.id, msg.claimId, verdict.delaySeconds, verdict.error);
      case 'postpone':
        return postpone(this.pool, msg.id, msg.claimId, verdict.delaySeconds, verdict.error);
      case 'dead':
        return markDead(this.pool, msg.id, msg.claimId, verdict.error);
      case 'unknown_topic':
        return releaseUnknownTopic(this.pool, msg.id, msg.claimId, this.unknownTopicRecheckSeconds);
    }
  }

  private report(msg: ClaimedMessage, verdict: Verdict): void {
    const base = { messageId: msg.publicId, topic: msg.topic, attempt: msg.attempts };
    switch (verdict.kind) {
      case 'done':
        if (this.logEachMessage) this.log.info(base, `${msg.topic} done`);
        if (verdict.handler !== null && this.reporter.wants('done')) {
          this.reporter.outcome({ ...base, handler: verdict.handler, outcome: 'done', durationMs: verdict.durationMs });
        }
        return;
      case 'unknown_topic':
        this.reporter.outcome({ ...base, handler: null, outcome: 'unknown_topic', durationMs: 0 });
        return;
      default:
        if (verdict.failures.length === 0) {
          this.reporter.outcome({ ...base, handler: null, outcome: 'dead', durationMs: 0, error: verdict.error });
          return;
        }
        for (const f of verdict.failures) {
          const outcome = verdict.kind === 'postpone' ? 'postponed' : verdict.kind;
          this.reporter.outcome({ ...base, handler: f.handler, outcome, durationMs: f.durationMs, error: f.error });
        }
    }
  }
}
