import type { Db } from '../db/client.ts';
import { ASYNC_COMMIT, intArray, query, textArray, uuidArray } from './worker-sql.ts';

/*
 * Settling a claimed message: recording its outcome. Every statement here is one autocommitted
 * UPDATE, so each message's outcome is committed on its own: one message's failure never rolls
 * back another's finished work. Commits are asynchronous (see src/outbox/worker-sql.ts for what a
 * database crash can then cause: a redelivery, never a loss).
 *
 * Every one is fenced: `WHERE id = $id AND claim_id = $token AND status = 'PENDING'`. A worker
 * whose lease ran out while it was still working (a long GC pause, a cut network) may come back
 * after another worker claimed the same row; its update then matches nothing and the newer
 * claim's outcome stands. Each function says whether it still held the claim, per (id, claim).
 *
 * The lease verbs (extend, hand back) are in src/outbox/lease.ts.
 */

const FENCE = `id = $1 and claim_id = $2::uuid and status = 'PENDING'`;

async function fenced(db: Db, name: string, text: string, values: unknown[]): Promise<boolean> {
  const res = await query(db, name, text, values);
  return (res.rowCount ?? 0) > 0;
}

/**
 * Records one handler's success as soon as it finishes, before the next handler of the same
 * message runs: if the worker dies between two handlers, the redelivery runs only the ones not
 * recorded here. (The last handler's success is recorded with DONE, in the same write.)
 */
export function recordHandlerDone(db: Db, id: number, claimId: string, handler: string): Promise<boolean> {
  return fenced(
    db,
    'outbox-handler-done',
    `update outbox
        set handlers_done = case when $3 = any(handlers_done) then handlers_done
                                 else array_append(handlers_done, $3::text) end
       from ${ASYNC_COMMIT}
      where ${FENCE}`,
    [id, claimId, handler],
  );
}

export interface DoneItem {
  id: number;
  claimId: string;
  /** The handler whose success completes the message, recorded in the same write (or null). */
  lastHandler: string | null;
}

const MARK_DONE = `
  update outbox o
     set status = 'DONE', processed_at = now(), claim_id = null,
         handlers_done = case when v.handler is null or v.handler = any(o.handlers_done) then o.handlers_done
                              else array_append(o.handlers_done, v.handler) end
    from unnest($1::bigint[], $2::uuid[], $3::text[]) with ordinality as v(id, claim_id, handler, n),
         ${ASYNC_COMMIT}
   where o.id = v.id and o.claim_id = v.claim_id and o.status = 'PENDING'
  returning v.n`;

/**
 * Marks messages DONE, one message or many in one UPDATE: each row fenced on its own claim.
 * Returns, per item and in order, whether that (id, claim) was still held: the match is on the
 * pair, so a worker that somehow holds two claims of one message learns about each separately.
 */
export async function markDoneMany(db: Db, items: readonly DoneItem[]): Promise<boolean[]> {
  const n = items.length;
  const ids = new Array<number>(n);
  const claims = new Array<string>(n);
  const handlers = new Array<string | null>(n);
  for (let i = 0; i < n; i++) {
    const it = items[i]!;
    ids[i] = it.id;
    claims[i] = it.claimId;
    handlers[i] = it.lastHandler;
  }
  const res = await query<{ n: string }>(db, 'outbox-mark-done', MARK_DONE, [intArray(ids), uuidArray(claims), textArray(handlers)]);
  const held = new Array<boolean>(n).fill(false);
  for (const r of res.rows) held[Number(r.n) - 1] = true;
  return held;
}

/** Every handler has succeeded: one message, one fenced write. */
export async function markDone(db: Db, id: number, claimId: string, lastHandler?: string): Promise<boolean> {
  return (await markDoneMany(db, [{ id, claimId, lastHandler: lastHandler ?? null }]))[0]!;
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
    'outbox-retry',
    `update outbox
        set available_at = now() + make_interval(secs => $3), claim_id = null, last_error = $4
       from ${ASYNC_COMMIT}
      where ${FENCE}`,
    [id, claimId, delaySeconds, lastError],
  );
}

/** Out of attempts, or a failure no retry can fix. Kept, with its last error, for a person to look at. */
export function markDead(db: Db, id: number, claimId: string, lastError: string): Promise<boolean> {
  return fenced(
    db,
    'outbox-dead',
    `update outbox
        set status = 'DEAD', processed_at = now(), claim_id = null, last_error = $3
       from ${ASYNC_COMMIT}
      where ${FENCE}`,
    [id, claimId, lastError],
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
    'outbox-unknown-topic',
    `update outbox
        set attempts = greatest(attempts - 1, 0), claim_id = null,
            available_at = now() + make_interval(secs => $3)
       from ${ASYNC_COMMIT}
      where ${FENCE}`,
    [id, claimId, recheckSeconds],
  );
}

/**
 * Group commit for DONE. Messages finished in the same turn of the event loop go into one UPDATE
 * (the write is scheduled with setImmediate, after every handler that finished in this turn has
 * reported), and at most one write is in flight: whatever finishes meanwhile goes into the next.
 * An idle worker adds no delay (the first finished message is written in the same turn), a busy
 * one writes hundreds of rows per statement, as graphile-worker's batched completion and pg-boss's
 * complete() do. Each (id, claim) still learns on its own whether it held its claim.
 *
 * A write that fails (database briefly unreachable) is tried again, up to 5 times over ~6 s;
 * after that its messages are reported as not recorded and their leases bring them back.
 */
export class DoneBatcher<T extends DoneItem> {
  private queue: T[] = [];
  private writing = false;
  private scheduled = false;
  private idle: (() => void)[] = [];

  constructor(
    private readonly db: Db,
    /** Called once per item: true = DONE under its claim, false = claim superseded, null = not recorded. */
    private readonly onResult: (item: T, held: boolean | null, err?: unknown) => void,
    private readonly maxBatch = 1000,
  ) {}

  get pending(): number {
    return this.queue.length + (this.writing ? 1 : 0);
  }

  add(item: T): void {
    this.queue.push(item);
    if (!this.scheduled && !this.writing) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  /** Resolves when nothing is queued or being written. */
  settled(): Promise<void> {
    if (this.queue.length === 0 && !this.writing && !this.scheduled) return Promise.resolve();
    return new Promise((r) => this.idle.push(r));
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.writing) return;
    void this.writeAll();
  };

  private async writeAll(): Promise<void> {
    this.writing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.length <= this.maxBatch ? this.queue : this.queue.slice(0, this.maxBatch);
        this.queue = batch === this.queue ? [] : this.queue.slice(this.maxBatch);
        let held: boolean[] | undefined;
        let error: unknown;
        for (let i = 0; i < 5 && held === undefined; i++) {
          try {
            held = await markDoneMany(this.db, batch);
          } catch (err) {
            error = err;
            if (i < 4) await new Promise((r) => setTimeout(r, 200 * 2 ** i));
          }
        }
        for (let i = 0; i < batch.length; i++) this.onResult(batch[i]!, held ? held[i]! : null, held ? undefined : error);
      }
    } finally {
      this.writing = false;
      const waiters = this.idle;
      this.idle = [];
      for (const w of waiters) w();
    }
  }
}
