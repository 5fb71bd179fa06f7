import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  char,
  check,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  uniqueIndex,
} from 'drizzle-orm/pg-core';
import { bookings } from './bookings.ts';
import { ts } from './columns.ts';
import { users } from './users.ts';

/*
 * Events for other services (src/events/). Consumers of the JetStream log keep their state here.
 */

/**
 * The inbox: one row per (consumer group, event) whose effect committed. Inserted in the same
 * transaction as the effect, so "effect applied" and "event recorded as seen" commit together or
 * not at all; a redelivered event finds its row and is skipped. This is what makes a non-idempotent
 * effect (an increment) happen once under at-least-once delivery.
 */
export const processedMessages = pgTable(
  'processed_messages',
  {
    consumerGroup: text('consumer_group').notNull(),
    /** The event's Nats-Msg-Id: the outbox message's public id. */
    messageId: text('message_id').notNull(),
    /** Where it was in the stream, for people reading this table (not used for dedup). */
    streamSeq: bigint('stream_seq', { mode: 'number' }),
    processedAt: ts('processed_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.consumerGroup, t.messageId] })],
);

/**
 * Consumer-side dead letters: an event whose handler failed on its last delivery
 * (EVENTS_MAX_DELIVER). Kept with its data so it can be read, and replayed once the cause is fixed
 * (`npm run consume:earnings -- --replay-dead`). One row per (group, event): a second failure
 * after a replay updates it.
 */
export const consumerDeadLetters = pgTable(
  'consumer_dead_letters',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    consumerGroup: text('consumer_group').notNull(),
    messageId: text('message_id').notNull(),
    streamSeq: bigint('stream_seq', { mode: 'number' }),
    subject: text('subject').notNull(),
    /** The NATS headers as a plain object (topic, key, occurred-at, schema version…). */
    headers: jsonb('headers').notNull(),
    /** The event's body as published (JSON). */
    data: jsonb('data').notNull(),
    deliveries: integer('deliveries').notNull(),
    lastError: text('last_error').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    /** Set when a replay applied it; null = still dead. */
    replayedAt: ts('replayed_at'),
  },
  (t) => [
    uniqueIndex('consumer_dead_letters_group_message_key').on(t.consumerGroup, t.messageId),
    index('consumer_dead_letters_open_idx')
      .on(t.consumerGroup, t.id)
      .where(sql`replayed_at is null`),
  ],
);

/**
 * The hosts' earnings ledger, kept by the earnings consumer (src/events/earnings/) from
 * booking.created (+ total) and booking.cancelled (− total) events, by increments. Per consumer
 * group, so a rebuild into a new group runs beside the live one (GET /hosts/me/earnings reads
 * EVENTS_EARNINGS_GROUP). Money in minor units.
 */
export const hostEarnings = pgTable(
  'host_earnings',
  {
    consumerGroup: text('consumer_group').notNull(),
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    currency: char('currency', { length: 3 }).notNull(),
    confirmedTotal: bigint('confirmed_total', { mode: 'number' }).notNull().default(0),
    cancelledTotal: bigint('cancelled_total', { mode: 'number' }).notNull().default(0),
    bookings: integer('bookings').notNull().default(0),
    cancellations: integer('cancellations').notNull().default(0),
    updatedAt: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.consumerGroup, t.hostId, t.currency] })],
);

export const EARNINGS_COUNTED_FROM = ['event', 'rebuild', 'gap'] as const;

/**
 * The bookings each group's earnings ledger has counted: one row per (group, booking) whose total
 * is in host_earnings' confirmed_total, `cancelled` once it is in cancelled_total too. What makes
 * the ledger count a booking once whichever message brings it (the relay's event, a backfilled
 * copy, a rebuild from the bookings table, a cancellation whose creation never reached the
 * stream), where the inbox only knows message ids. Never purged, unlike the inbox: a booking can
 * be cancelled months after it was made.
 */
export const earningsBookings = pgTable(
  'earnings_bookings',
  {
    consumerGroup: text('consumer_group').notNull(),
    bookingId: bigint('booking_id', { mode: 'number' })
      .notNull()
      .references(() => bookings.id, { onDelete: 'cascade' }),
    cancelled: boolean('cancelled').notNull().default(false),
    /**
     * How its creation came to be counted: its booking.created event; a rebuild from the bookings
     * table (`consume:earnings --replay --accept-gap`); or its cancellation, which arrived with no
     * creation counted before it (a gap: the creation was never published, or lost).
     */
    countedFrom: text('counted_from', { enum: EARNINGS_COUNTED_FROM }).notNull(),
    countedAt: ts('counted_at').notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.consumerGroup, t.bookingId] }),
    check('earnings_bookings_counted_from_check', sql`${t.countedFrom} in ('event', 'rebuild', 'gap')`),
  ],
);
