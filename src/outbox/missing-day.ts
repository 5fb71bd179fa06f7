import type pg from 'pg';
import { pgError, PG } from '../db/pg-errors.ts';
import type { RetryableWriteFault } from '../db/write-faults.ts';
import { executorOf, run, statement } from './executor.ts';
import { reattachPendingDetaches } from './half-detached-days.ts';

/*
 * A write that finds no partition for its row. The outbox is partitioned by day (ADR 0019) and has
 * no DEFAULT partition, which would forbid DETACH … CONCURRENTLY (ADR 0025): a row whose day has
 * no partition is refused (23514, "no partition of relation "outbox" found for row"). That happens
 * only when a day is missing, dropped by hand or never made; the day is then made on the miss, and
 * the transaction, rolled back whole by the error, is run again (withTransaction,
 * src/db/transaction.ts, repairs it as a retryable write fault the outbox registers:
 * database-hooks.ts). A write whose day exists pays nothing for this.
 *
 * A day can also be there and out of sight: marked "detach pending" by an interrupted
 * DETACH … CONCURRENTLY (half-detached-days.ts). Making the day cannot help (the marked partition
 * still covers it), so today's and the coming days are first given back; the write then finds its
 * day within the same retry instead of failing until someone finishes the detach by hand.
 */

/** How long giving a marked day back may wait for older transactions before the write fails (as outbox_ensure_partitions' lock_timeout). */
const REATTACH_LOCK_TIMEOUT_MS = 5_000;

const NO_PARTITION = /^no partition of relation "outbox" found for row/;

/** True for a write refused because the outbox has no partition for its row's day. */
function isMissingOutboxPartition(err: unknown): boolean {
  const e = pgError(err);
  return e?.code === PG.checkViolation && NO_PARTITION.test(e.message);
}

const ENSURE_DAYS = statement('outbox-ensure-days', 'select outbox_ensure_partitions() as made');

/**
 * Gives back today's and the coming days left "detach pending", then makes every missing day of the
 * outbox from today to a week ahead (outbox_ensure_partitions, migrations/0011: it fills holes,
 * takes turns with other callers on an advisory lock, and fails with one line naming the fix if a
 * stray table holds a day's name). Returns the days given back and made.
 */
async function makeMissingOutboxDays(pool: pg.Pool): Promise<string[]> {
  const given = await reattachPendingDetaches(pool, { after: new Date(), lockTimeoutMs: REATTACH_LOCK_TIMEOUT_MS });
  const [row] = await run<{ made: string[] }>(pool, ENSURE_DAYS, []);
  return [...given, ...row!.made];
}

/** A write refused for its missing day, repaired by making the day: what withTransaction retries. */
export const missingOutboxDay: RetryableWriteFault = {
  name: 'outbox: a day with no partition',
  recognises: isMissingOutboxPartition,
  repair: (db) => makeMissingOutboxDays(executorOf(db)),
};
