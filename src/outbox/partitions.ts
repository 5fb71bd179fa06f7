import type pg from 'pg';
import { execute, run, statement, unnamed, type Executor } from './executor.ts';

/*
 * The outbox's partitions: one table a day (UTC) of created_at, named outbox_YYYYMMDD, and the
 * first one, outbox_until_YYYYMMDD, which holds everything written before the outbox was
 * partitioned (migrations/0008_partitioned_outbox.sql, ADR 0019).
 *
 * Why by day of created_at: created_at never changes, so a row never moves between partitions
 * (a move is a DELETE and an INSERT, and a claim racing it fails instead of skipping the row);
 * and a day's messages are DONE within minutes of the day's end, so a day's table can go as a
 * whole once the retention has passed over it: DETACH … CONCURRENTLY and DROP, a few KiB of WAL,
 * instead of a DELETE per row that writes the rows' worth of WAL and gives no disk back.
 *
 * There is no DEFAULT partition (DETACH … CONCURRENTLY refuses a table that has one), so a row
 * whose day has no partition is refused; withTransaction then makes the day and runs the
 * transaction again (src/outbox/missing-day.ts, ADR 0025). The days ahead are made by every
 * migration run and by the worker's housekeeping, each time up to a week past today (the SQL
 * function's default), so no business write pays for making its day while either runs;
 * `stayhub_outbox_partitions_ahead_seconds` and the OutboxPartitionsRunningOut alert say when that
 * margin shrinks.
 */

const DAY_MS = 24 * 3600 * 1000;

/** A partition of the outbox and the created_at range it holds, [from, to). */
export interface OutboxPartition {
  name: string;
  /** null for the first partition (MINVALUE: everything before `to`). */
  from: Date | null;
  to: Date;
  /** An earlier DETACH … CONCURRENTLY was interrupted: the table is half detached. */
  detachPending: boolean;
}

/** The start of `at`'s day, UTC. */
export function dayOf(at: Date): Date {
  return new Date(Math.floor(at.getTime() / DAY_MS) * DAY_MS);
}

const LIST_PARTITIONS = statement(
  'outbox-list-partitions',
  `select c.relname as name,
          (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\)'))[1]::timestamptz as "from",
          (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']*)''\\)'))[1]::timestamptz as "to",
          i.inhdetachpending as detach_pending
     from pg_inherits i
     join pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'outbox'::regclass
    order by 3`,
);

/**
 * The partitions, oldest first. The bounds are read back from the catalogue as PostgreSQL prints
 * them and cast again in the same session, so its TimeZone and DateStyle cannot garble them.
 */
export async function listOutboxPartitions(q: Executor): Promise<OutboxPartition[]> {
  const rows = await run<{ name: string; from: Date | null; to: Date; detach_pending: boolean }>(q, LIST_PARTITIONS, []);
  return rows.map((r) => ({ name: r.name, from: r.from, to: r.to, detachPending: r.detach_pending }));
}

/**
 * Makes the partitions of every day from the last one's end to `daysAhead` (default 7) days after
 * `now`'s, and returns the names made. The SQL is the database's function
 * outbox_ensure_partitions (migrations/0008_partitioned_outbox.sql), so a migration run calls the
 * same code without this module.
 */
const ENSURE_WEEK = statement('outbox-ensure-partitions', 'select outbox_ensure_partitions($1) as made');
const ENSURE_DAYS_AHEAD = statement('outbox-ensure-partitions-days', 'select outbox_ensure_partitions($1, $2) as made');

export async function ensureOutboxPartitions(q: Executor, opts: { now?: Date; daysAhead?: number } = {}): Promise<string[]> {
  const rows =
    opts.daysAhead === undefined
      ? await run<{ made: string[] }>(q, ENSURE_WEEK, [opts.now ?? new Date()])
      : await run<{ made: string[] }>(q, ENSURE_DAYS_AHEAD, [opts.now ?? new Date(), opts.daysAhead]);
  return rows[0]!.made;
}

/** A partition the retention has passed over, detached and dropped, and the rows it held (estimated). */
export interface DroppedPartition {
  name: string;
  rows: number;
}

/**
 * Drops every partition whose whole day is older than `retentionDays` and whose rows are all DONE
 * and were all processed before the retention's cutoff. A partition holding anything else (a DEAD
 * letter, a message still retrying, one finished late) is left, and its DONE rows past the
 * retention go row by row (src/outbox/purge.ts).
 *
 * Why nothing can come into such a partition between the check and the DETACH: rows are written
 * with created_at = the writing transaction's start (today), or, for a lane message, the
 * created_at of a PENDING message (src/outbox/lanes.ts), and the check found none here; a DONE
 * row is never changed again. DETACH … CONCURRENTLY waits for every transaction that could still
 * see the partition, without blocking new ones; it cannot run inside a transaction block, so each
 * statement here is its own. If the process dies between its two phases, the partition stays
 * "detach pending" (invisible to new queries): the next round finishes it (FINALIZE) and drops it,
 * or gives it back if it holds anything but old DONE rows. A later day left so is given back by
 * the housekeeping before the purge runs (src/outbox/half-detached-days.ts).
 */
export async function dropExpiredOutboxPartitions(
  pool: pg.Pool,
  opts: { retentionDays: number; now?: Date; stopping?: () => boolean },
): Promise<DroppedPartition[]> {
  const cutoff = new Date((opts.now ?? new Date()).getTime() - opts.retentionDays * DAY_MS);
  const expired = (await listOutboxPartitions(pool)).filter((p) => p.to.getTime() <= cutoff.getTime());
  const dropped: DroppedPartition[] = [];
  // Interrupted detaches first: PostgreSQL refuses a DETACH … CONCURRENTLY while another
  // partition of the table is still pending detach. Finished, then dropped only if it holds
  // nothing the outbox owes: the detach may have been a person's, not the purge's. Otherwise it
  // stays detached, and settleDetachedOutboxDays attaches it again.
  for (const p of expired.filter((x) => x.detachPending)) {
    await execute(pool, unnamed(`alter table outbox detach partition ${p.name} finalize`), []);
    if (await allDoneBefore(pool, p.name, cutoff))
      dropped.push(await dropOutboxPartition(pool, { name: p.name, detachPending: false, detached: true }));
  }
  for (const p of expired.filter((x) => !x.detachPending)) {
    if (opts.stopping?.()) break;
    if (await allDoneBefore(pool, p.name, cutoff)) dropped.push(await dropOutboxPartition(pool, p));
  }
  return dropped;
}

/** The rows a table holds as its statistics say ($1: its name). */
const ESTIMATED_ROWS = statement(
  'outbox-partition-estimated-rows',
  `select greatest(reltuples, 0)::float8 as n from pg_class where oid = $1::regclass`,
);

/**
 * Detaches one partition CONCURRENTLY (or finishes an interrupted detach) and drops it; returns
 * the rows it held as its statistics say (reltuples, kept by autovacuum; 0 if never analyzed).
 * Not counted: count(*) read the whole day, 271 ms of the 426 a drop of a million rows took in the
 * bench, and 1.2 s at five million, on the CPU the drain needs. Checks nothing:
 * dropExpiredOutboxPartitions decides what may go.
 */
export async function dropOutboxPartition(
  pool: pg.Pool,
  p: Pick<OutboxPartition, 'name' | 'detachPending'> & { detached?: boolean },
): Promise<DroppedPartition> {
  const [stats] = await run<{ n: number }>(pool, ESTIMATED_ROWS, [p.name]);
  const rows = stats?.n ?? 0;
  if (!p.detached)
    await execute(pool, unnamed(`alter table outbox detach partition ${p.name} ${p.detachPending ? 'finalize' : 'concurrently'}`), []);
  await execute(pool, unnamed(`drop table ${p.name}`), []);
  return { name: p.name, rows };
}

/** A table named like a day of the outbox that is not one of its partitions, and the range its name says. */
export interface DetachedDay {
  name: string;
  /** null for `outbox_until_YYYYMMDD` (everything before `to`). */
  from: Date | null;
  to: Date;
}

const LIST_DETACHED_DAYS = statement(
  'outbox-list-detached-days',
  `select c.relname as name
     from pg_class c
    where c.relnamespace = 'public'::regnamespace and c.relkind = 'r' and not c.relispartition
      and c.relname ~ '^outbox_(until_)?[0-9]{8}$'
    order by c.relname`,
);

/**
 * Tables named like a day of the outbox (outbox_YYYYMMDD, outbox_until_YYYYMMDD) that are not its
 * partitions: a drop interrupted between its DETACH and its DROP (dropOutboxPartition runs them
 * as two statements, the first of which cannot be in a transaction), or a day detached by hand. A
 * partition still pending detach is one of its partitions (relispartition), not listed here.
 */
export async function listDetachedOutboxDays(q: Executor): Promise<DetachedDay[]> {
  const rows = await run<{ name: string }>(q, LIST_DETACHED_DAYS, []);
  return rows.map(({ name }) => {
    const [, until, y, m, d] = /^outbox_(until_)?(\d{4})(\d{2})(\d{2})$/.exec(name)!;
    const day = new Date(Date.UTC(Number(y), Number(m) - 1, Number(d)));
    return until ? { name, from: null, to: day } : { name, from: day, to: new Date(day.getTime() + DAY_MS) };
  });
}

/** What became of the detached days: dropped, attached again, or left with the reason. */
export interface DetachedDaysResult {
  dropped: DroppedPartition[];
  reattached: string[];
  /** Left as they are: what PostgreSQL refused, and the fix, in one line each. */
  stuck: { name: string; reason: string }[];
}

/**
 * Finishes what a crash or a hand left half done with a day of the outbox (listDetachedOutboxDays):
 *
 * - a day past the retention whose rows are all DONE before the cutoff (what the purge detached
 *   it for) is dropped: the drop that was interrupted;
 * - any other is attached again, because it holds messages the outbox still owes (PENDING: a
 *   customer's email not sent yet) or keeps (a DEAD letter someone must see, DONE rows within the
 *   retention): dropping them would lose those without a word. ATTACH checks that each row
 *   belongs to the day; the table still has the keys it had as a partition.
 *
 * A day of today or later never gets here while it is detached: the days ahead are made first, and
 * outbox_ensure_partitions adopts a table that has a coming day's name (migrations/0011). A table
 * PostgreSQL refuses (not shaped like the outbox, rows of other days, a day another partition now
 * covers) is left as it is and reported with the fix: nothing here deletes rows it could not place.
 */
export async function settleDetachedOutboxDays(pool: pg.Pool, opts: { retentionDays: number; now?: Date }): Promise<DetachedDaysResult> {
  const cutoff = new Date((opts.now ?? new Date()).getTime() - opts.retentionDays * DAY_MS);
  const result: DetachedDaysResult = { dropped: [], reattached: [], stuck: [] };
  for (const day of await listDetachedOutboxDays(pool)) {
    try {
      if (day.to.getTime() <= cutoff.getTime() && (await allDoneBefore(pool, day.name, cutoff))) {
        // The rows as the statistics say, as dropOutboxPartition counts them.
        const rows = await run<{ n: number }>(pool, ESTIMATED_ROWS, [day.name]);
        await execute(pool, unnamed(`drop table ${day.name}`), []);
        result.dropped.push({ name: day.name, rows: rows[0]?.n ?? 0 });
      } else {
        const from = day.from ? `'${day.from.toISOString()}'` : 'minvalue';
        await execute(
          pool,
          unnamed(`alter table outbox attach partition ${day.name} for values from (${from}) to ('${day.to.toISOString()}')`),
          [],
        );
        result.reattached.push(day.name);
      }
    } catch (err) {
      result.stuck.push({
        name: day.name,
        reason:
          `the table ${day.name}, named like a day of the outbox, can be neither dropped nor given back to it ` +
          `(${(err as Error).message}): look at its rows, then rename it (ALTER TABLE ${day.name} RENAME TO ${day.name}_leftover) or drop it`,
      });
    }
  }
  return result;
}

/**
 * Every row DONE, and processed before `cutoff`: four probes of the partition's partial indexes
 * (PENDING rows through the claim's two, one for each value of turn's nullness).
 */
async function allDoneBefore(pool: pg.Pool, name: string, cutoff: Date): Promise<boolean> {
  // The partition's name is in the text: unnamed, so no connection keeps a statement per day.
  const [row] = await run<{ held: boolean }>(
    pool,
    unnamed(
      `select exists (select 1 from ${name} where status = 'PENDING' and turn is null)
           or exists (select 1 from ${name} where status = 'PENDING' and turn is not null)
           or exists (select 1 from ${name} where status = 'DEAD')
           or exists (select 1 from ${name} where status = 'DONE' and processed_at >= $1) as held`,
    ),
    [cutoff],
  );
  return !row!.held;
}

/**
 * How far ahead the partitions reach: seconds from `now` to the last partition's end. Below zero,
 * nothing can be written to the outbox (no partition holds today).
 */
export async function partitionsAheadSeconds(q: Executor, now = new Date()): Promise<number> {
  const last = (await listOutboxPartitions(q)).at(-1);
  return last ? (last.to.getTime() - now.getTime()) / 1000 : -Infinity;
}
