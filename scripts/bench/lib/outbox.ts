import type pg from 'pg';
import { priorityOf } from '../../../src/messages/topics.ts';
import { fillDoneHistory as fillDone, insertEventRow, insertFlood, payloadValueCounts } from '../../../src/outbox/testing.ts';

/*
 * The bench's one door into our outbox. The bench writes rows the product never writes (bench
 * topics, a backlog of N messages in one statement, a DONE history) and measures statements of
 * src/outbox that are not its public surface (the claim, the DONE write, the purge's batch, a
 * partition's drop). The SQL of both is the outbox's own, in src/outbox/testing.ts; this door
 * adds what only the application knows (a topic's priority, which topic and handlers a booking's
 * history has), so nothing else under scripts/bench/ reaches the outbox but through it or
 * src/outbox/index.ts.
 *
 * Not here: the pgbench booking transaction (api-pgbench.ts), a plain-SQL replica of the service's
 * own, which must stay one script pgbench runs.
 */

export {
  claimOn,
  connectClaimClient,
  explainClaim as explainCachedClaim,
  markDoneMany,
  dayOf,
  dropOutboxPartition,
  listOutboxPartitions,
  purgeDoneBatch,
  PENDING_PROBE_SQL as OURS_PENDING_SQL,
  outboxExists,
  fillBacklog,
  fillWarmUp,
  insertOne,
  insertPayloads,
  wakeUp,
  countPending,
  countNotDone,
  statusCounts,
  emptyOutbox,
  analyzeOutbox,
  outboxSizes,
  newestRowIndexEntries,
  storeTraceContext,
  applyStorageCandidates,
  STORAGE_CANDIDATES,
} from '../../../src/outbox/testing.ts';

/**
 * `rows` DONE booking.created messages as the worker leaves them (the guest's confirmation done),
 * created 1 ms apart from `created` on and processed 1 ms apart from `processed` on: the history
 * every long-outbox measurement starts from. `created` decides the partition: the claim section's
 * history, 30 days back, shares the first partition with the PENDING rows; the purge and growth
 * sections' is a day of its own (history.ts).
 */
export function fillDoneHistory(c: pg.Client, rows: number, created: Date, processed: Date): Promise<number> {
  return fillDone(c, rows, created, processed, { topic: 'booking.created', handlersDone: ['guest-confirmation'] });
}

/** How many booking.created originals (lane copies left out) the outbox holds for each booking id, since `since`. */
export function bookingEventsSince(c: pg.Client, since: string): Promise<Map<string, number>> {
  return payloadValueCounts(c, 'booking.created', 'bookingId', since);
}

/**
 * The noisy neighbour's flood, `count` rows of `topic` in one statement. Fair: each row's turn is
 * what enqueue would give it written one by one, at the topic's priority; FIFO: neither (as before
 * turns).
 */
export function fillFlood(c: pg.Client, topic: string, payload: string, count: number, fair: { group: string } | null): Promise<void> {
  return insertFlood(c, topic, payload, count, fair ? { group: fair.group, priority: priorityOf(topic) } : null);
}

/**
 * One event as enqueue writes it (`group`: its priority, group and turn) or as it was written
 * before turns (null), its wake-up inside its transaction; returns its public id.
 */
export function insertEvent(c: pg.Client, topic: string, payload: string, group: string | null): Promise<string> {
  return insertEventRow(c, topic, payload, group !== null ? { group, priority: priorityOf(topic) } : null);
}
