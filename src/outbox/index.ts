/*
 * The outbox: its tables (schema.ts) and their migrations (migrations/, migrate.ts), its SQL and
 * its runner, as one module. Everything outside src/outbox/
 * goes through this file; nothing outside it writes SQL that names the outbox tables
 * (`npm run depcheck` enforces the imports, and the dependency rules in .dependency-cruiser.cjs).
 *
 * It knows topics, handlers and payloads only as what the application registers: a topic is a
 * string, a payload is JSON, a handler is a name and a function. The application's catalogue of
 * topics and subscriptions, and its typed enqueue, are src/messages/.
 *
 * Producing (the API's side):
 *   enqueue(tx, topic, payload, { key, group, priority })  an event, inside the caller's transaction; never commits
 *   insertWithEvent(tx, rowInsert, topic, …)               a business row and its event in one statement
 *
 * Consuming (the worker's side):
 *   createWorker({ db, registry, logger, payloadSchemas, ...settings })  the runner: runOnce / runUntilEmpty / start / stop
 *   HandlerRegistry, Handler                    topic → handlers, from the application's explicit list
 *   HandlerCatalogue                            which topics are handled and by whom, as plain data
 *
 * Operating:
 *   outboxStats, pendingUpTo, listMessages, findMessage, depthHistory, auditFor, requeueDead, purgeOutbox, probeOutbox
 *   ensureOutboxPartitions                      the days ahead of the partitioned outbox
 *   listPendingDetaches, partitionsReattached   days left half detached, and how many this process gave back
 *
 * Composing (once per process, by whatever builds the application):
 *   ensureWalSlot, requireWalSlot, setOutboxWrites  OUTBOX_WRITES=wal: messages written to the WAL, rows made by the worker
 *   registerOutboxHooks                         a write that misses its day is repaired and retried
 *                                               (withTransaction), migrate runs migrateOutbox
 *   migrateOutbox                               the outbox's own migrations, then the days ahead
 *   messagesCreatedBetween                      a time window of messages, any status (events backfill)
 *   messagesAsWritten, pendingOfTopics, …       each message once, its lane work folded in (audits, the chaos run)
 *
 * What a handler finished (the events path's reconcile and audits ask these, never the table):
 *   finishedPage, lastFinishedBefore            messages a handler finished in a window, lane work folded in
 *   finishedPayloadValues                       a payload field's values of those messages, joined by the caller
 *   messagesById                                messages as written (lane keys decoded), with payloads
 *
 * Tests, the bench and the chaos run write and read rows directly through src/outbox/testing.ts.
 */

export { OUTBOX_CHANNEL } from './channel.ts';
export { HandlerCatalogue } from './catalogue.ts';

// Producing
export { enqueue, insertWithEvent, type EnqueuedMessage, type EnqueueOptions, type RowInsert } from './enqueue.ts';
export {
  ensureWalSlot,
  materialize,
  requireWalSlot,
  setOutboxWrites,
  walSlotState,
  type OutboxWrites,
  type WalSlotState,
} from './wal-messages.ts';

// Consuming
export { createWorker, type Worker } from './runner/loop.ts';
export type { RunnerSettings, WorkerOptions } from './runner/options.ts';
export { HandlerRegistry, type Handler, type HandlerContext } from './runner/registry.ts';
export { DependencyUnavailableError, PermanentError, type FailureRules } from './runner/failures.ts';
export type { WorkerSummary } from './runner/outcomes.ts';
export type { Outcome, OutcomeEvent, PayloadSchema, WorkerEvents } from './types.ts';
export { housekeepOnce, type Chore, type HousekeepingCounts } from './runner/housekeeping.ts';
export { backoffDelaySeconds, retryDelaySeconds, type BackoffOptions } from './backoff.ts';
// Group commit, for writes of other features that finish many at a time (webhook attempts)
export { DoneBatcher } from './done-batch.ts';
// The lease core: the webhook deliveries are claimed, fenced and handed back by it too (ADR 0049).
export { batchFence, fence, handBackStatement, lockChosen, release, takeLease, type LeasedTable } from './lease/leased-table.ts';
export { HandBacks, type GiveBack } from './lease/hand-backs.ts';
export { StaleSweep } from './lease/stale-sweep.ts';

// Operating
export { outboxStats, pendingUpTo, probeOutbox, type OutboxStats, type TopicStats } from './stats.ts';
export {
  listMessages,
  findMessage,
  idOf,
  auditFor,
  depthHistory,
  messagesCreatedBetween,
  type OutboxMessageRow,
  type CreatedMessage,
  type CreatedBetween,
  type ListFilter,
  type AuditEntry,
  type DepthPoint,
} from './messages.ts';
export { messagesAsWritten, pendingOfTopics, slowestMessages, latestOfTopic, type MessageAsWritten } from './as-written.ts';
export { requeueDead, type RequeueCriteria, type RequeueResult } from './requeue.ts';
export { purgeDone, purgeOutbox, type PurgeResult } from './purge.ts';
export { ensureOutboxPartitions, partitionsAheadSeconds } from './partitions.ts';
export { listPendingDetaches, partitionsReattached } from './half-detached-days.ts';

// Composing
export { registerOutboxHooks } from './database-hooks.ts';
export { migrateOutbox, OUTBOX_MIGRATIONS_DIR, type OutboxMigrationRun } from './migrate.ts';
export { OUTBOX_STATUSES, type OutboxStatus } from './schema.ts';

// What a handler finished
export { finishedPage, type FinishedMessage, type FinishedPageQuery } from './finished-page.ts';
export { lastFinishedBefore } from './last-finished.ts';
export { finishedPayloadValues, type FinishedPayloadValuesQuery } from './finished-payload-values.ts';
export { messagesById, type MessageById } from './messages-by-id.ts';
