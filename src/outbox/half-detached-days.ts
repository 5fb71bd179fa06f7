import pg from 'pg';
import { execute, inTransaction, run, statement, unnamed, type Executor } from './executor.ts';

/*
 * A day of the outbox left half detached, and how it is given back (ADR 0043).
 *
 * `ALTER TABLE outbox DETACH PARTITION … CONCURRENTLY` runs in two transactions. The first marks the
 * partition "detach pending" (pg_inherits.inhdetachpending) and commits; the second waits for every
 * transaction that might still see it, then detaches it. Cancelled or killed while it waits (a
 * reader held the partition, a statement_timeout, a person's Ctrl-C), it leaves the mark: from then
 * on every new statement plans the outbox without that partition. Its rows are out of sight: a
 * claim does not find its PENDING messages, a settle finds no row to update (so a message handled
 * then is handled again once the day is back: ADR 0043), and a write of its day finds no partition
 * (23514), for as long as nobody runs `DETACH … FINALIZE`. The mark cannot be taken back: the only
 * way out is to finish the detach.
 *
 * What is right after that depends on the day. A day the purge meant to drop (past the retention)
 * is finished and then dropped or attached again by the purge's own rules (partitions.ts).
 * Any later day is one the outbox still owns: today's and the coming days are where writes go,
 * and a day within the retention holds messages it keeps; so FINALIZE and ATTACH run in one
 * transaction, and the day is never seen missing by a statement that starts after it. ATTACH does
 * not read the rows: the first phase left a CHECK constraint equal to the day's bounds, which
 * PostgreSQL takes as proof.
 */

/** A partition of the outbox marked "detach pending", and the created_at range it held, [from, to). */
export type PendingDetach = {
  name: string;
  /** The bound as PostgreSQL prints it ('MINVALUE' has no quotes): reused verbatim when attaching again. */
  bound: string;
  /** The end of its range. */
  to: Date;
};

/** The same advisory lock as outbox_ensure_partitions (migrations/0011): one process at a time changes the outbox's days. */
const DAYS_LOCK = 727019;

/** Partitions this process has given back, for the metrics (stayhub_outbox_partitions_reattached_total). */
let reattached = 0;

/** How many partitions this process has given back to the outbox since it started. */
export function partitionsReattached(): number {
  return reattached;
}

/** The outbox's partitions marked "detach pending", oldest first. */
const LIST_PENDING = statement(
  'outbox-list-pending-detaches',
  `select c.relname as name,
          pg_get_expr(c.relpartbound, c.oid) as bound,
          (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']*)''\\)'))[1]::timestamptz as "to"
     from pg_inherits i
     join pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'outbox'::regclass and i.inhdetachpending
    order by 3`,
);

/** The outbox's partitions marked "detach pending" (an interrupted DETACH … CONCURRENTLY). */
export function listPendingDetaches(q: Executor): Promise<PendingDetach[]> {
  return run<PendingDetach>(q, LIST_PENDING, []);
}

/** $1 the lock timeout ('5000ms'), $2 the days' lock. */
const LOCK_DAYS = statement('outbox-lock-days', `select set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)`);

/**
 * Gives back to the outbox every partition marked "detach pending" whose range ends after `after`:
 * FINALIZE and ATTACH with the same bounds, in one transaction, so no statement that starts after it
 * finds the day missing. Returns the names given back.
 *
 * FINALIZE waits for every transaction older than it (it must not change what they see); past
 * `lockTimeoutMs` the day is left marked, and the error (55P03, lock_not_available) goes to the caller:
 * the next write that misses, or the next housekeeping round, tries again.
 */
export async function reattachPendingDetaches(pool: pg.Pool, opts: { after: Date; lockTimeoutMs: number }): Promise<string[]> {
  const later = (rows: PendingDetach[]) => rows.filter((p) => new Date(p.to).getTime() > opts.after.getTime());
  if (later(await listPendingDetaches(pool)).length === 0) return [];
  const given = await inTransaction(pool, async (tx) => {
    await run(tx, LOCK_DAYS, [`${opts.lockTimeoutMs}ms`, DAYS_LOCK]);
    // Read again under the lock: another process may have given them back meanwhile.
    const names: string[] = [];
    for (const p of later(await listPendingDetaches(tx))) {
      const name = pg.escapeIdentifier(p.name);
      // DDL naming a day: sent unnamed, as its own simple query.
      await execute(tx, unnamed(`alter table outbox detach partition ${name} finalize`), []);
      await execute(tx, unnamed(`alter table outbox attach partition ${name} ${p.bound}`), []);
      names.push(p.name);
    }
    return names;
  });
  reattached += given.length;
  return given;
}
