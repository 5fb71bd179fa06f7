import { z } from 'zod';
import { OUTBOX_STATUSES } from '../outbox/index.ts';

/** Topic names are dotted lower-case words ('booking.created'); anything else cannot match a row. */
const topicName = z
  .string()
  .trim()
  .min(1)
  .max(100)
  .regex(/^[a-z0-9_.-]+$/i, 'must be a topic name');

export const listMessagesQuery = z.strictObject({
  // Accepts 'dead' as well as 'DEAD': people type it in URLs.
  status: z
    .string()
    .transform((s) => s.toUpperCase())
    .pipe(z.enum(OUTBOX_STATUSES))
    .optional(),
  topic: topicName.optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(200).optional(),
});
export type ListMessagesQuery = z.infer<typeof listMessagesQuery>;

export const messageParams = z.strictObject({ publicId: z.string().uuid() });

/** Exactly one of `topic` or `ids`: replaying "everything dead" is deliberately not one click. */
export const bulkRetryBody = z.union([
  z.strictObject({ topic: topicName }),
  z.strictObject({ ids: z.array(z.string().uuid()).min(1).max(500) }),
]);
export type BulkRetryBody = z.infer<typeof bulkRetryBody>;

export const depthQuery = z.strictObject({
  minutes: z.coerce
    .number()
    .int()
    .min(5)
    .max(24 * 60)
    .default(60),
});

const iso = z.string();

export const handlerState = z.object({
  name: z.string(),
  /**
   * done: recorded in handlers_done. pending: the message is still PENDING and this handler has
   * not finished. dead: the message died before this handler finished. not_run: the message is
   * DONE without this handler (registered after it was handled). retired: recorded as done but
   * no longer registered.
   */
  state: z.enum(['done', 'pending', 'dead', 'not_run', 'retired']),
});

export const messageSummary = z.object({
  id: z.string().uuid(),
  topic: z.string(),
  key: z.string().nullable(),
  status: z.enum(OUTBOX_STATUSES),
  leased: z.boolean(),
  attempts: z.number().int(),
  /** When it may be claimed: its creation, or after a failure the next attempt's time. */
  availableAt: iso,
  /** While a worker holds it (leased): when that worker's lease runs out; otherwise null. */
  leasedUntil: iso.nullable(),
  createdAt: iso,
  claimedAt: iso.nullable(),
  processedAt: iso.nullable(),
  lastError: z.string().nullable(),
  handlersDone: z.array(z.string()),
  /**
   * Set on a lane message: the work of this one handler, moved out of its original message (whose
   * id is originId) so that while it retries only this handler's later work of the key waits.
   */
  lane: z.string().nullable(),
  originId: z.string().uuid().nullable(),
  /** The trace of the request that wrote it, to look up in the tracing backend; null when tracing was off. */
  traceId: z.string().nullable(),
  /** False when no handler is registered for the topic: the worker leaves such a message PENDING. */
  topicHandled: z.boolean(),
  handlers: z.array(handlerState),
});

export const messageListResponse = z.object({ items: z.array(messageSummary), nextCursor: z.string().nullable() });

export const historyEvent = z.object({
  at: iso,
  event: z.enum(['created', 'claimed', 'available', 'done', 'dead', 'requeued']),
  detail: z.string().optional(),
});

export const messageDetailResponse = messageSummary.extend({
  payload: z.unknown(),
  /**
   * What the row can honestly tell: creation, the latest claim, the next attempt or lease deadline,
   * the end, and every replay from the audit table. Earlier attempts leave no trace but the count.
   */
  history: z.array(historyEvent),
});

const topicStats = z.object({
  topic: z.string(),
  handled: z.boolean(),
  pending: z.number().int(),
  leased: z.number().int(),
  dead: z.number().int(),
  doneLastHour: z.number().int(),
  oldestPendingAgeSeconds: z.number().nullable(),
});

export const statsResponse = z.object({
  pending: z.number().int(),
  leased: z.number().int(),
  dead: z.number().int(),
  doneLastHour: z.number().int(),
  oldestPendingAgeSeconds: z.number().nullable(),
  byTopic: z.array(topicStats),
  /** Topics with PENDING messages and no handler: a producer shipped ahead of its consumer. */
  unknownTopics: z.array(z.string()),
  generatedAt: iso,
});

export const retryResponse = z.object({ affected: z.number().int(), messageIds: z.array(z.string().uuid()) });

export const depthResponse = z.object({
  points: z.array(z.object({ at: iso, pending: z.number().int(), dead: z.number().int() })),
});
