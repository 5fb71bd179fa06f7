import type { Db } from '../db/client.ts';
import { executorOf, run, statement, type Executor } from './executor.ts';
import { finishedBy } from './finished-by.ts';
import { listOutboxPartitions } from './partitions.ts';

/**
 * The latest finished in processed_at [$1, $2) among rows created in [$4, $5); $3 the handler.
 * The DONE rows' processed_at index is a BRIN index (migration 0002): it finds the pages whose
 * summaries meet the window, in every day the created_at bounds leave (pruned when the statement
 * starts), and the few rows found are sorted. `created_at < $2` always holds (processed_at is
 * never before created_at), so the days ahead are left out.
 */
const LAST_FINISHED = statement(
  'outbox-last-finished-in',
  `select coalesce(o.origin_id, o.public_id)::text as message_id,
          (extract(epoch from o.processed_at) * 1000)::float8 as processed_ms
     from outbox o
    where o.status = 'DONE'
      and o.processed_at >= $1::timestamptz
      and o.processed_at < $2::timestamptz
      and o.created_at >= $4::timestamptz
      and o.created_at < least($5::timestamptz, $2::timestamptz)
      and ${finishedBy('$3')}
    order by o.processed_at desc
    limit 1`,
);

type Last = { messageId: string; processedAt: Date };

const HOUR_MS = 3_600_000;
/** The windows before `before` looked in first, each a BRIN read of every day: the last is the widest. */
const WINDOWS_MS = [HOUR_MS, 24 * HOUR_MS, 7 * 24 * HOUR_MS];
const DISTANT = '-infinity';

async function lastIn(q: Executor, handler: string, from: string, before: Date, created: [string, string]): Promise<Last | null> {
  const [r] = await run<{ message_id: string; processed_ms: number }>(q, LAST_FINISHED, [from, before.toISOString(), handler, ...created]);
  return r ? { messageId: r.message_id, processedAt: new Date(r.processed_ms) } : null;
}

/**
 * The last message `handler` finished (finished-by.ts) processed before `before`, or null.
 *
 * Read in widening windows of processed_at (the hour, the day, the week before `before`): the
 * first that holds one holds the last. Past the week, day by day, newest first, the first day that
 * holds one gives a candidate, and a window from that candidate's processed_at to the week's start
 * (any day) finds whether a message of an older day finished later still. No read walks the DONE
 * history in order. A handler that finished nothing before `before` costs every day's DONE rows
 * once, as the walk of the B-tree over processed_at did before it.
 */
export async function lastFinishedBefore(db: Db, handler: string, before: Date): Promise<Last | null> {
  const q = executorOf(db);
  const anyDay: [string, string] = [DISTANT, 'infinity'];
  for (const ms of WINDOWS_MS) {
    const found = await lastIn(q, handler, new Date(before.getTime() - ms).toISOString(), before, anyDay);
    if (found) return found;
  }
  const weekStart = new Date(before.getTime() - WINDOWS_MS.at(-1)!);
  const days = (await listOutboxPartitions(q)).filter((d) => (d.from?.getTime() ?? -Infinity) < weekStart.getTime()).reverse();
  for (const d of days) {
    const candidate = await lastIn(q, handler, DISTANT, weekStart, [d.from?.toISOString() ?? DISTANT, d.to.toISOString()]);
    if (candidate) return lastIn(q, handler, candidate.processedAt.toISOString(), weekStart, anyDay);
  }
  return null;
}
