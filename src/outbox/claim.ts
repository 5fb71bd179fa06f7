import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';

export interface ClaimedMessage {
  id: number;
  publicId: string;
  topic: string;
  key: string | null;
  payload: unknown;
  /** This claim included: the first delivery is attempt 1. */
  attempts: number;
  /** Handlers that already succeeded on an earlier attempt: they are not run again. */
  handlersDone: string[];
  /** The fencing token of this claim: every settle is `WHERE id = … AND claim_id = token`. */
  claimId: string;
  /** When the lease ends (database clock). */
  leaseUntil: Date;
}

/*
 * Claiming: one statement, so one short transaction, and no transaction stays open while a
 * handler runs (a handler may talk to SMTP for seconds; a transaction open that long would hold
 * row locks, pin a connection and hold back vacuum).
 *
 * - `status = 'PENDING' AND available_at <= now()`: available_at is the only time predicate. It is
 *   the creation time of a new message, the backoff deadline of a failed one, and the lease
 *   deadline of a claimed one, so "due" means all three at once: new, done backing off, or whose
 *   worker's lease ran out (the worker died). Walked through outbox_pending_available_idx
 *   (available_at, id) WHERE PENDING: already in order, and DONE rows never enter the index.
 *
 * - `FOR UPDATE SKIP LOCKED`: FOR UPDATE so two workers claiming at the same moment cannot both
 *   take a row; SKIP LOCKED so the second steps over rows the first is claiming and takes the
 *   next ones instead of waiting for the first one's transaction (which would make a second
 *   worker add nothing). If a row changed between our snapshot and our lock (someone claimed and
 *   committed it), Postgres re-checks the WHERE against the new version: its available_at is now
 *   in the future, so it is dropped, never claimed twice.
 *
 * - Per-key order: a message is not due while an older message with the same key is still
 *   PENDING, whether that one is new, backing off or leased. So at most one message of a key is
 *   ever in flight, and a booking's cancellation email waits for its confirmation email. DEAD
 *   does not block its key (it has stopped being retried; holding the key hostage would stop
 *   every later event of that booking). Messages without a key (null) are not ordered. One probe
 *   of outbox_pending_key_idx (key, id) WHERE PENDING.
 *
 * - The lease: available_at moves to now() + lease, which hides the row from every other claim
 *   until then. A worker that dies needs no cleanup: the lease simply ends.
 *
 * - attempts + 1 at claim time, not at failure time: a message that kills its worker every time
 *   (out of memory, segfault in a native module) still counts its attempts and reaches DEAD.
 *
 * - claim_id: a fresh uuid per claim. A worker that outlived its lease (paused, network cut) may
 *   come back and try to settle; the fence `claim_id = $token` makes its update match nothing
 *   once another worker has claimed the row since.
 */
export async function claimBatch(
  db: Db,
  opts: { limit: number; leaseSeconds: number; claimId: string },
): Promise<ClaimedMessage[]> {
  const { rows } = await db.execute<{
    id: string;
    public_id: string;
    topic: string;
    key: string | null;
    payload: unknown;
    attempts: number;
    handlers_done: string[];
    claim_id: string;
    available_at: Date;
  }>(sql`
    with due as (
      select o.id
        from outbox o
       where o.status = 'PENDING'
         and o.available_at <= now()
         and not exists (
               select 1 from outbox e
                where e.key = o.key and e.status = 'PENDING' and e.id < o.id)
       order by o.available_at, o.id
       limit ${opts.limit}
         for update skip locked
    )
    update outbox
       set attempts = outbox.attempts + 1,
           claim_id = ${opts.claimId}::uuid,
           claimed_at = now(),
           available_at = now() + make_interval(secs => ${opts.leaseSeconds})
      from due
     where outbox.id = due.id
    returning outbox.id, outbox.public_id, outbox.topic, outbox.key, outbox.payload, outbox.attempts,
              outbox.handlers_done, outbox.claim_id, outbox.available_at`);
  return rows
    .map((r) => ({
      id: Number(r.id),
      publicId: r.public_id,
      topic: r.topic,
      key: r.key,
      payload: r.payload,
      attempts: r.attempts,
      handlersDone: r.handlers_done,
      claimId: r.claim_id,
      leaseUntil: new Date(r.available_at),
    }))
    // UPDATE … RETURNING does not keep the CTE's order; handing them out oldest-first does.
    .sort((a, b) => a.id - b.id);
}
