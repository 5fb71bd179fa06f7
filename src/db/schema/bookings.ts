import { sql } from 'drizzle-orm';
import { bigint, bigserial, char, check, date, index, integer, jsonb, pgTable, primaryKey, text, uuid } from 'drizzle-orm/pg-core';
import { daterange, ts } from './columns.ts';
import { properties } from './properties.ts';
import { users } from './users.ts';

export const BOOKING_STATUSES = ['confirmed', 'cancelled'] as const;
export type BookingStatus = (typeof BOOKING_STATUSES)[number];

export const bookings = pgTable(
  'bookings',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    propertyId: bigint('property_id', { mode: 'number' })
      .notNull()
      .references(() => properties.id),
    guestId: bigint('guest_id', { mode: 'number' })
      .notNull()
      .references(() => users.id),
    checkIn: date('check_in', { mode: 'string' }).notNull(),
    checkOut: date('check_out', { mode: 'string' }).notNull(),
    /**
     * The stay as a half-open range, derived so it can never disagree with the two dates. The
     * exclusion constraint on (property_id, stay) is what makes a double booking impossible.
     */
    stay: daterange('stay')
      .notNull()
      .generatedAlwaysAs(sql`daterange(check_in, check_out, '[)')`),
    guests: integer('guests').notNull(),
    status: text('status', { enum: BOOKING_STATUSES }).notNull().default('confirmed'),
    // The price as it was charged: later changes to the property never change a booking.
    currency: char('currency', { length: 3 }).notNull(),
    nights: integer('nights').notNull(),
    nightlyPrice: integer('nightly_price').notNull(),
    subtotal: integer('subtotal').notNull(),
    cleaningFee: integer('cleaning_fee').notNull(),
    serviceFee: integer('service_fee').notNull(),
    total: integer('total').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    cancelledAt: ts('cancelled_at'),
  },
  (t) => [
    index('bookings_guest_idx').on(t.guestId, t.id),
    index('bookings_property_idx').on(t.propertyId, t.id),
    check('bookings_dates_check', sql`${t.checkOut} > ${t.checkIn}`),
    check('bookings_status_check', sql`${t.status} in ('confirmed', 'cancelled')`),
  ],
);

/**
 * Idempotency-Key records for POST /bookings, per user, kept IDEMPOTENCY_TTL_HOURS. The row is
 * inserted (state 'in_progress') in the same transaction as the booking, so a concurrent request
 * with the same key blocks on the primary key until the first commits, then replays its response.
 */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    userId: bigint('user_id', { mode: 'number' })
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    key: text('key').notNull(),
    /** SHA-256 of the canonical request body: the same key with another body is refused. */
    requestHash: text('request_hash').notNull(),
    responseStatus: integer('response_status'),
    responseBody: jsonb('response_body'),
    createdAt: ts('created_at').notNull().defaultNow(),
    expiresAt: ts('expires_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.key] }), index('idempotency_keys_expires_idx').on(t.expiresAt)],
);
