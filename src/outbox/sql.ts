/*
 * What the worker's own writes (lease, settle) share. They go straight to node-postgres
 * as named prepared statements (src/db/prepared.ts), not through drizzle's query builder: they run
 * for every batch (hundreds of times a second under load); named, each connection parses and plans
 * them once, and no query object is rebuilt per call. The SQL stays in the module of its verb.
 *
 * ## Asynchronous commit for the worker's own writes
 *
 * `ASYNC_COMMIT` is a FROM item that runs `set_config('synchronous_commit', 'off', true)` inside
 * the statement's own (implicit) transaction. It is local to that transaction, and PostgreSQL reads
 * the setting when the transaction commits, so exactly this statement's COMMIT returns without
 * waiting for its WAL flush (fsync, ~1–3 ms on our disks, most of a claim's or settle's time). No
 * other statement is affected: the connection goes back to the pool with the server's setting, so
 * a handler's writes and the caller's transaction (API) still wait for their flush.
 * The claim gets the same from its own connection's session setting
 * (src/outbox/claim-connection.ts), which saves planning this join on every claim.
 *
 * What a database crash can then cause (the WAL writer flushes within wal_writer_delay, 200 ms by
 * default, so only the last moment of the worker's writes is at stake; and any later synchronous
 * commit, such as a business write's, flushes every earlier record with it):
 *   - a lost DONE, retry or dead letter: the message is PENDING again under its old claim and is
 *     delivered again when that lease ends. A redelivery, which at-least-once allows.
 *   - a lost claim or lease extension: the row goes back to its earlier lease deadline. If a
 *     handler of ours was still running across the crash and recovery, another worker may claim the
 *     message and run it while ours finishes: the one case where a handler can run twice IN
 *     PARALLEL, as with a worker cut off from the database by a network partition. Our late
 *     settle is then refused by the claim fence, so the row's final state stays right.
 *   - a lost hand-back or unknown-topic release: the message waits for its lease to end.
 * Nothing is ever lost: every change of the worker only moves a message forward (claimed → DONE)
 * or back to PENDING, and a lost write leaves it PENDING (test/integration/outbox/crash.test.ts).
 */
export const ASYNC_COMMIT = `(select set_config('synchronous_commit', 'off', true)) as async_commit`;

/*
 * `created_at < now() + 1 day`, in every statement that reads or writes outbox rows by id or by
 * status. The outbox has a partition per day, a week of them made ahead and empty
 * (src/outbox/partitions.ts); a statement that says nothing of created_at opens and probes every
 * one of them on each run, its indexes included. This condition is stable when the statement
 * starts, so PostgreSQL leaves those partitions out before running it. On the drain floor (claim
 * and DONE alone) the week ahead cost 10,958 msg/s against 14,286 with the first partition alone;
 * with this condition 11,626, within this machine's noise of the first (ADR 0019). No row is written with a created_at a day ahead of the database's clock: a message's is its
 * transaction's start, a lane message's its original's (a row written further ahead would wait for
 * its day to be claimed or settled).
 */
export const notAhead = (alias?: string) => `${alias ? `${alias}.` : ''}created_at < now() + interval '1 day'`;

/**
 * The oldest and newest created_at of a batch as bounds for `created_at between` (the DONE write,
 * src/outbox/settle.ts; the claim by id, src/outbox/claim.ts): the outbox is
 * partitioned by day of created_at (src/outbox/partitions.ts), and the bounds let the UPDATE skip
 * the partitions outside them instead of probing each one's primary key for every id: the older
 * days (all DONE), and the days made ahead (empty; tomorrow's is always there, so without the upper
 * bound every id was probed twice). A second wider each way, so a millisecond rounded either way
 * never excludes the row; unknown, no bound.
 */
export function notBefore(createdAtMs: number): string {
  return Number.isFinite(createdAtMs) ? new Date(createdAtMs - 1000).toISOString() : '-infinity';
}

export function notAfter(createdAtMs: number): string {
  return Number.isFinite(createdAtMs) ? new Date(createdAtMs + 1000).toISOString() : 'infinity';
}

/*
 * Array parameters as PostgreSQL array literals, built in one pass: node-postgres would convert
 * each element on its own (prepareValue, a regex escape per string), a cost per message in every
 * batched write. Numbers and uuids need no quoting; text is quoted and escaped.
 */
export function intArray(values: readonly number[]): string {
  return `{${values.join(',')}}`;
}

export function floatArray(values: readonly number[]): string {
  return `{${values.join(',')}}`;
}

export function uuidArray(values: readonly string[]): string {
  return `{${values.join(',')}}`;
}

export function textArray(values: readonly (string | null)[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const v = values[i];
    out += v === null || v === undefined ? 'NULL' : `"${v.replace(/[\\"]/g, '\\$&')}"`;
  }
  return `${out}}`;
}
