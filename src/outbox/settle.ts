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

interface DoneItem {
  id: number;
  claimId: string;
  /** The handler whose success completes the message, recorded in the same write. */
  handler: string | null;
}

/**
 * The UPDATE that marks messages DONE, for one message or many: each row is fenced on its own
 * claim, and RETURNING says which claims were still held. `lastHandler`, when given, is recorded
 * in the same write, so the common case (the last or only handler just succeeded) costs one write.
 */
async function markDoneMany(db: Db, items: DoneItem[]): Promise<Set<number>> {
  const res = await db.execute<{ id: string }>(sql`
    update outbox o
       set status = 'DONE', processed_at = now(), claim_id = null,
           handlers_done = case when v.handler is null or v.handler = any(o.handlers_done) then o.handlers_done
                                else array_append(o.handlers_done, v.handler) end
      from unnest(${sql.param(items.map((i) => i.id))}::bigint[],
                  ${sql.param(items.map((i) => i.claimId))}::uuid[],
                  ${sql.param(items.map((i) => i.handler))}::text[]) as v(id, claim_id, handler)
     where o.id = v.id and o.claim_id = v.claim_id and o.status = 'PENDING'
    returning o.id`);
  return new Set(res.rows.map((r) => Number(r.id)));
}

/** Every handler has succeeded: one message, one fenced write. */
export async function markDone(db: Db, id: number, claimId: string, lastHandler?: string): Promise<boolean> {
  return (await markDoneMany(db, [{ id, claimId, handler: lastHandler ?? null }])).has(id);
}

/**
 * Group commit for DONE. With fsync on, every autocommitted UPDATE waits for its WAL flush, and a
 * worker that commits each finished message alone spends most of its time waiting for the disk
 * (it drained ~1,000 no-op messages/s where graphile-worker, which batches completions, drained
 * ~8,000). Here at most one write is in flight: the first finished message is written at once (no
 * added latency when the worker is idle), and every message that finishes while that write is in
 * flight goes into the next one. Each message's outcome still stands alone: a row whose claim was
 * superseded is simply not in RETURNING, and only that message learns it lost its claim.
 */
export class DoneBatcher {
  private queue: (DoneItem & { resolve(held: boolean): void; reject(err: unknown): void })[] = [];
  private writing = false;

  constructor(
    private readonly db: Db,
    private readonly maxBatch = 500,
  ) {}

  markDone(id: number, claimId: string, lastHandler?: string): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.queue.push({ id, claimId, handler: lastHandler ?? null, resolve, reject });
      void this.writeAll();
    });
  }

  private async writeAll(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          const held = await markDoneMany(this.db, batch);
          for (const item of batch) item.resolve(held.has(item.id));
        } catch (err) {
          // The caller retries (dispatch's persist); a write that failed changed nothing.
          for (const item of batch) item.reject(err);
        }
      }
    } finally {
      this.writing = false;
    }
  }
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
