import { z } from 'zod';

/**
 * The contract between the API (which writes events) and the worker (which handles them): every
 * topic's name and the schema of its payload. Both sides import this module; the outbox itself
 * knows no topic. A payload that does not match its topic's schema is refused by `enqueue`
 * (./enqueue.ts) and dead-lettered by the worker, which is given these schemas when it is built
 * (src/worker/outbox-worker.ts).
 */

const bookingEvent = z.object({
  bookingId: z.string().uuid(),
  propertyId: z.string().uuid(),
  propertyTitle: z.string(),
  guestEmail: z.string().email(),
  guestName: z.string(),
  hostEmail: z.string().email(),
  hostName: z.string(),
  checkIn: z.string().date(),
  checkOut: z.string().date(),
  guests: z.number().int().positive(),
  nights: z.number().int().positive(),
  total: z.number().int().nonnegative(),
  currency: z.string().length(3),
  /** Passed downstream so a redelivered effect is recognisable as the same effect. */
  idempotencyKey: z.string().min(1),
});

export const TOPICS = {
  /** A booking was confirmed. Snapshot of what the emails say. */
  'booking.created': bookingEvent,
  /** A confirmed booking was cancelled (by its guest or its host). */
  'booking.cancelled': bookingEvent.extend({ cancelledBy: z.enum(['guest', 'host']) }),
  /**
   * A property was created or changed. A trigger, not a snapshot: the handler re-reads the row,
   * which is the truth, so the latest state wins whatever order messages are handled in.
   */
  'property.changed': z.object({
    propertyId: z.string().uuid(),
    reason: z.enum(['created', 'updated', 'index-write-failed']).optional(),
    idempotencyKey: z.string().min(1).optional(),
  }),
  /** The system disabled a host's webhook endpoint (410 Gone, or failing for too long): the host is told. */
  'webhook.endpoint-disabled': z.object({
    endpointId: z.string().uuid(),
    url: z.string(),
    hostEmail: z.string().email(),
    hostName: z.string(),
    reason: z.string(),
    idempotencyKey: z.string().min(1),
  }),
} as const;

/**
 * Which topics the worker claims first (ADR 0033): higher first; a topic not listed is 0. A booking's
 * emails are what a guest waits for, a property's reindex is not: a host's bulk edit must not queue
 * ahead of another host's confirmations. Written on each message by enqueue; changing a priority
 * applies to messages written from then on.
 */
export const TOPIC_PRIORITY: Readonly<Partial<Record<TopicName, number>>> = Object.freeze({
  'booking.created': 1,
  'booking.cancelled': 1,
});

export type TopicName = keyof typeof TOPICS;
export type PayloadOf<T extends TopicName> = z.infer<(typeof TOPICS)[T]>;

export const TOPIC_NAMES = Object.keys(TOPICS) as TopicName[];

export function isTopicName(name: string): name is TopicName {
  return Object.hasOwn(TOPICS, name);
}

/**
 * A topic's priority: what TOPIC_PRIORITY says, 0 for a topic it does not list. The outbox knows
 * no topic's meaning, only that a higher number is claimed first (src/outbox/enqueue.ts).
 */
export function priorityOf(topic: string): number {
  return (TOPIC_PRIORITY as Readonly<Record<string, number | undefined>>)[topic] ?? 0;
}
