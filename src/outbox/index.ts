/*
 * The outbox: its table, its SQL and its runner, as one module. Everything outside src/outbox/
 * goes through this file; nothing outside it writes SQL that names the outbox tables
 * (`npm run depcheck` enforces the imports, and the dependency rules in .dependency-cruiser.cjs).
 *
 * Producing (the API's side):
 *   enqueue(tx, topic, payload, { key, group }) an event, inside the caller's transaction; never commits
 *   insertWithEvent(tx, rowInsert, topic, …)    a business row and its event in one statement
 *
 * Consuming (the worker's side):
 *   createWorker({ db, config, registry, … })  the runner: runOnce / runUntilEmpty / start / stop
 *   HandlerRegistry, Handler                    topic → handlers, built from SUBSCRIPTIONS
 *
 * Operating:
 *   outboxStats, pendingUpTo, listMessages, findMessage, depthHistory, auditFor, requeueDead, purgeOutbox, probeOutbox
 *   ensureOutboxPartitions                      the days ahead of the partitioned outbox
 *   messagesCreatedBetween                      a time window of messages, any status (events backfill)
 *
 * The contract between the two sides: TOPICS (payload schemas) and SUBSCRIPTIONS (who handles what).
 */

// The contract
export { TOPICS, TOPIC_NAMES, TOPIC_PRIORITY, OUTBOX_CHANNEL, isTopicName, type TopicName, type PayloadOf } from './topics.ts';
export { SUBSCRIPTIONS, HANDLER_CATALOGUE, HandlerCatalogue, type Subscription, type SubscriptionName } from './subscriptions.ts';

// Producing
export { enqueue, insertWithEvent, type EnqueuedMessage, type EnqueueOptions, type RowInsert } from './enqueue.ts';

// Consuming
export { createWorker, type Worker, type WorkerOptions } from './runner/worker.ts';
export { HandlerRegistry, type Handler, type HandlerContext } from './runner/registry.ts';
export { DependencyUnavailableError } from './runner/failures.ts';
export type { WorkerSummary } from './runner/outcomes.ts';
export type { Outcome, OutcomeEvent, WorkerEvents } from './types.ts';
export { housekeepOnce, type Chore, type HousekeepingCounts } from './runner/housekeeping.ts';
export { backoffDelaySeconds, retryDelaySeconds, type BackoffOptions } from './backoff.ts';
// Group commit, for writes of other features that finish many at a time (webhook attempts)
export { DoneBatcher } from './done-batch.ts';

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
export { requeueDead, type RequeueCriteria, type RequeueResult } from './requeue.ts';
export { purgeDone, purgeOutbox, type PurgeResult } from './purge.ts';
export { ensureOutboxPartitions, partitionsAheadSeconds } from './partitions.ts';
