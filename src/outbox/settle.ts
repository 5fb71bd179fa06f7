import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';

/*
 * Settling a claimed message. Every statement here is one autocommitted UPDATE, so each message's
 * outcome is committed on its own: one message's failure never rolls back another's finished work.
 *
 * Every one is fenced: `WHERE id = $id AND claim_id = $token AND status = 'PENDING'`. A worker
 * whose lease ran out while it was still working (a long GC pause, a cut network) may come back
 * after another worker claimed the same row; its update then matches nothing and the newer
 * claim's outcome stands. Each function says whether it still held the claim.
 */

const fence = (id: number, claimId: string) =>
  sql`id = ${id} and claim_id = ${claimId}::uuid and status = 'PENDING'`;

async function fenced(db: Db, query: ReturnType<typeof sql>): Promise<boolean> {
  const res = await db.execute(query);
  return (res.rowCount ?? 0) > 0;
}

/**
 * Records one handler's success as soon as it finishes, before the next handler runs: if the
 * worker dies between two handlers, the redelivery runs only the ones not recorded here.
 */
export function recordHandlerDone(db: Db, id: number, claimId: string, handler: string): Promise<boolean> {
  return fenced(
    db,
    sql`update outbox
           set handlers_done = case when ${handler} = any(handlers_done) then handlers_done
                                    else array_append(handlers_done, ${handler}::text) end
         where ${fence(id, claimId)}`,
  );
}

/**
 * Every handler has succeeded. `lastHandler`, when given, is recorded in the same UPDATE: the
 * common case (the last or only handler just succeeded) costs one write, not two.
 */
export function markDone(db: Db, id: number, claimId: string, lastHandler?: string): Promise<boolean> {
  const handlers = lastHandler
    ? sql`, handlers_done = case when ${lastHandler} = any(handlers_done) then handlers_done
                                 else array_append(handlers_done, ${lastHandler}::text) end`
    : sql``;
  return fenced(
    db,
    sql`update outbox set status = 'DONE', processed_at = now(), claim_id = null ${handlers}
         where ${fence(id, claimId)}`,
  );
}

/**
 * A transient failure: back to waiting, due again after `delaySeconds`. available_at, which held
 * the lease deadline, now holds the backoff deadline; releasing the claim is the same write.
 */
export function scheduleRetry(
  db: Db,
  id: number,
  claimId: string,
  delaySeconds: number,
  lastError: string,
): Promise<boolean> {
  return fenced(
    db,
    sql`update outbox
           set available_at = now() + make_interval(secs => ${delaySeconds}), claim_id = null,
               last_error = ${lastError}
         where ${fence(id, claimId)}`,
  );
}

/** Out of attempts, or a failure no retry can fix. Kept, with its last error, for a person to look at. */
export function markDead(db: Db, id: number, claimId: string, lastError: string): Promise<boolean> {
  return fenced(
    db,
    sql`update outbox
           set status = 'DEAD', processed_at = now(), claim_id = null, last_error = ${lastError}
         where ${fence(id, claimId)}`,
  );
}

/**
 * No handler is registered for the topic. Not a failure (no amount of retrying grows a handler;
 * usually a producer deployed ahead of its consumer), so the attempt the claim counted is given
 * back, and the message is looked at again after `recheckSeconds` rather than on every poll.
 */
export function releaseUnknownTopic(db: Db, id: number, claimId: string, recheckSeconds: number): Promise<boolean> {
  return fenced(
    db,
    sql`update outbox
           set attempts = greatest(attempts - 1, 0), claim_id = null,
               available_at = now() + make_interval(secs => ${recheckSeconds})
         where ${fence(id, claimId)}`,
  );
}

/**
 * Shutdown: messages claimed but never started go back as they were (attempt not counted, due at
 * once) so another worker need not wait for the lease to end. Returns how many were handed back.
 */
export async function handBack(db: Db, claims: { id: number; claimId: string }[]): Promise<number> {
  if (claims.length === 0) return 0;
  const ids = claims.map((c) => c.id);
  const tokens = claims.map((c) => c.claimId);
  const res = await db.execute(sql`
    update outbox o
       set attempts = greatest(o.attempts - 1, 0), claim_id = null, available_at = now()
      from unnest(${sql.param(ids)}::bigint[], ${sql.param(tokens)}::uuid[]) as c(id, claim_id)
     where o.id = c.id and o.claim_id = c.claim_id and o.status = 'PENDING'`);
  return res.rowCount ?? 0;
}

/**
 * Keeps a claim alive while its handlers are still running: moves the lease deadline forward,
 * fenced like every settle. Without it, a handler that outlives LEASE_SECONDS would see its
 * message claimed and run a second time, in parallel, by another worker. A worker that dies stops
 * extending, so its messages still come back one lease after its last heartbeat.
 */
export function extendLease(db: Db, id: number, claimId: string, leaseSeconds: number): Promise<boolean> {
  return fenced(
    db,
    sql`update outbox set available_at = now() + make_interval(secs => ${leaseSeconds})
         where ${fence(id, claimId)}`,
  );
}
