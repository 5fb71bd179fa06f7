import type pg from 'pg';
import { reattachPendingDetaches } from './half-detached-days.ts';
import type { Logger } from '../logger.ts';

/*
 * A settle that finds no row for a message its worker holds. Usually the lease ran out and another
 * claim took the message: the fenced write (src/outbox/settle.ts) is right to leave it. But the row
 * may only be out of sight: an interrupted DETACH … CONCURRENTLY left its day marked "detach
 * pending" (half-detached-days.ts), and every new statement plans the outbox without that day.
 * Leaving the message then meant running its handlers again once the day was back and the lease
 * had run out: an email sent twice, with the same Message-ID (ADR 0043). So a write that missed
 * first gives back the days from the message's on, then is tried once more.
 */

/** How long giving a day back may wait for a transaction older than it, while the settle waits. */
const LOCK_TIMEOUT_MS = 5_000;

/**
 * Gives back every half-detached day of the outbox from that of the oldest message in
 * `createdAtMs` on; quiet when there is none (one read of the catalogue). Never throws: a day that
 * cannot be given back yet leaves the write's miss as it was.
 */
export async function bringDaysIntoSight(pool: pg.Pool, createdAtMs: readonly (number | undefined)[], log: Logger): Promise<void> {
  const oldest = Math.min(...createdAtMs.map((t) => t ?? 0));
  try {
    const given = await reattachPendingDetaches(pool, { after: new Date(oldest), lockTimeoutMs: LOCK_TIMEOUT_MS });
    if (given.length) log.warn({ tables: given }, 'outbox: a settle found its days half detached and gave them back to the outbox');
  } catch (err) {
    log.warn({ err }, 'outbox: a settle found its days half detached and could not give them back yet');
  }
}

/**
 * `markDone` for the items, and once more for those it did not find after their days were brought
 * into sight; per item, whether its claim was held.
 */
export async function markDoneInSight<T extends { createdAtMs?: number }>(
  pool: pg.Pool,
  items: readonly T[],
  markDone: (items: readonly T[]) => Promise<boolean[]>,
  log: Logger,
): Promise<boolean[]> {
  const held = await markDone(items);
  const missed = items.flatMap((item, i) => (held[i] ? [] : [i]));
  if (missed.length === 0) return held;
  await bringDaysIntoSight(
    pool,
    missed.map((i) => items[i]!.createdAtMs),
    log,
  );
  const again = await markDone(missed.map((i) => items[i]!));
  missed.forEach((i, k) => (held[i] = again[k]!));
  return held;
}
