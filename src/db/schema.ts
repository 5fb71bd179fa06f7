import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  doublePrecision,
  char,
  check,
  customType,
  date,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

/*
 * The tables. Internal ids are bigserial and never leave the database; what clients see is the
 * `public_id` UUID. Money is integer minor units; a stay is a half-open date range [check_in, check_out).
 * What drizzle-kit cannot express (the btree_gist extension, the EXCLUDE constraint) lives in the
 * hand-written migration `migrations/0001_booking_exclusion.sql`.
 */

const daterange = customType<{ data: string; driverData: string }>({ dataType: () => 'daterange' });
const tsvector = customType<{ data: string; driverData: string }>({ dataType: () => 'tsvector' });
const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

export const USER_ROLES = ['guest', 'host', 'admin'] as const;
export type UserRole = (typeof USER_ROLES)[number];

export const users = pgTable(
  'users',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    /** Stored as typed; uniqueness is case-insensitive through the lower(email) index below. */
    email: text('email').notNull(),
    name: text('name').notNull(),
    role: text('role', { enum: USER_ROLES }).notNull(),
    /** scrypt, in the self-describing form `scrypt$N$r$p$salt$hash` (see users/password.ts). */
    passwordHash: text('password_hash').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('users_email_lower_key').on(sql`lower(${t.email})`),
    check('users_role_check', sql`${t.role} in ('guest', 'host', 'admin')`),
  ],
);

export const sessions = pgTable(
  'sessions',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /** SHA-256 of the bearer token: a leaked table does not leak usable tokens. */
    tokenHash: text('token_hash').notNull().unique(),
    userId: bigint('user_id', { mode: 'number' })
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    expiresAt: ts('expires_at').notNull(),
    revokedAt: ts('revoked_at'),
    createdAt: ts('created_at').notNull().defaultNow(),
  },
  (t) => [index('sessions_user_idx').on(t.userId)],
);

export const properties = pgTable(
  'properties',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id),
    title: text('title').notNull(),
    description: text('description').notNull().default(''),
    city: text('city').notNull(),
    /** ISO 3166-1 alpha-2, upper case. */
    country: char('country', { length: 2 }).notNull(),
    /** ISO 4217, upper case. */
    currency: char('currency', { length: 3 }).notNull().default('EUR'),
    nightlyPrice: integer('nightly_price').notNull(),
    cleaningFee: integer('cleaning_fee').notNull().default(0),
    maxGuests: integer('max_guests').notNull(),
    active: boolean('active').notNull().default(true),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    index('properties_host_idx').on(t.hostId),
    check('properties_prices_check', sql`${t.nightlyPrice} > 0 and ${t.cleaningFee} >= 0`),
    check('properties_max_guests_check', sql`${t.maxGuests} between 1 and 100`),
  ],
);

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

export const OUTBOX_STATUSES = ['PENDING', 'DONE', 'DEAD'] as const;
export type OutboxStatus = (typeof OUTBOX_STATUSES)[number];

/**
 * The transactional outbox: one row per event, written in the same transaction as the business
 * change it describes, so the event exists if and only if the change committed.
 *
 * Partitioned by day of created_at (migrations/0008_partitioned_outbox.sql, src/outbox/partitions.ts):
 * the primary key on id and the unique public_id are each partition's own, as PostgreSQL allows no
 * unique index on a partitioned table without its partition key; one sequence keeps ids unique.
 */
export const outbox = pgTable(
  'outbox',
  {
    /** Internal order of writing; per-key ordering compares ids. */
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /**
     * The message's identity outside the database (admin API, logs, downstream dedup). Time-ordered
     * (a UUIDv7, migrations/0007): new ids land at the right edge of its unique index, not at a
     * random page of it, which kept the drain from slowing as the DONE history grows.
     */
    publicId: uuid('public_id')
      .notNull()
      .default(sql`outbox_uuid_v7()`)
      .unique(),
    /** An event name in the past tense ('booking.created'), never a command. */
    topic: text('topic').notNull(),
    /**
     * The aggregate the event is about (a booking's or property's public id). Messages sharing a
     * key are handled in the order they were written; different keys run in parallel.
     */
    key: text('key'),
    /** A snapshot of what the handlers need, taken when the event happened. */
    payload: jsonb('payload').notNull(),
    /** PENDING (new, backing off, or leased) | DONE | DEAD. */
    status: text('status', { enum: OUTBOX_STATUSES }).notNull().default('PENDING'),
    /** Claims so far. Counted at claim time, so a message that crashes its worker still dies. */
    attempts: integer('attempts').notNull().default(0),
    /**
     * When the message may be claimed: for a new message its creation time, after a failure the
     * backoff deadline. The key of the claim's index, so a claim never changes it (leasedUntil).
     */
    availableAt: ts('available_at').notNull().defaultNow(),
    /** The current claim's token; settling is fenced on it so a late worker cannot overwrite a newer claim. */
    claimId: uuid('claim_id'),
    claimedAt: ts('claimed_at'),
    /**
     * While claimed, the lease's deadline: the message is claimable again once it passes. In no
     * index, so a claim and a lease extension write no index entry (ADR 0022). Due means
     * `available_at <= now() and (leased_until is null or leased_until <= now())`.
     */
    leasedUntil: ts('leased_until'),
    /** Handlers that have finished for this message: a retry re-runs only the others. */
    handlersDone: text('handlers_done')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    /** When the message became DONE or DEAD. */
    processedAt: ts('processed_at'),
    /** The last failure (handler, error class, message), so a DEAD row explains itself. */
    lastError: text('last_error'),
    /**
     * When the event happened. A lane message (below) carries the original's, so its age is the
     * event's, not the deferral's.
     */
    createdAt: ts('created_at').notNull().defaultNow(),
    /**
     * Null for a message as written. Otherwise this row is a lane message: the work of one handler
     * (its name is here) that had to wait, moved out of its message so that only that handler's
     * later work of the key waits behind it (src/outbox/lanes.ts). Its key is `<lane>@<key>`.
     */
    lane: text('lane'),
    /** A lane message's original: the public id its handler sees as the message id (the relay's Nats-Msg-Id). */
    originId: uuid('origin_id'),
    /**
     * The W3C trace context of the span that wrote the event (the booking's request), so the
     * worker's handling continues that trace (src/telemetry/tracing.ts, placeAfterHop). Null when
     * tracing was off. A lane message carries its original's.
     */
    traceparent: text('traceparent'),
    tracestate: text('tracestate'),
    /**
     * Claimed before every lower one: its topic's priority, which the application registers
     * (TOPIC_PRIORITY in src/outbox/topics.ts) and enqueue writes. Higher first (ADR 0033).
     */
    priority: integer('priority').notNull().default(0),
    /**
     * Whose work this is, for fairness: what the application passed to enqueue (a host's public
     * id). Messages of one group take turns with other groups' (`turn`). Null: no group.
     */
    groupId: text('group_id'),
    /**
     * A first delivery's place in its priority (src/outbox/turns.ts): the group's previous turn + 1,
     * or the turn at the head of the queue if that is later; so a flooding group's messages are
     * spread out and another group's next message lands near the head. Null once the message
     * failed, was postponed or handed to a lane, and for rows written without one: available_at
     * then orders it, oldest first.
     */
    turn: bigint('turn', { mode: 'number' }),
  },
  (t) => [
    check('outbox_status_check', sql`${t.status} in ('PENDING', 'DONE', 'DEAD')`),
    /*
     * The claim's index for messages without a turn (retried, postponed, lane work: ADR 0033).
     * Partial, because DONE rows come to outnumber live ones by orders of magnitude: this index
     * holds only what the worker can still claim, so the claim stays as fast with a million DONE
     * rows behind it as with none, and it walks rows already in available_at order.
     */
    index('outbox_pending_available_idx')
      .on(t.availableAt, t.id)
      .where(sql`status = 'PENDING' and turn is null`),
    /*
     * The claim's other walk (ADR 0033): first deliveries, by priority, then turn. Partial on
     * `turn is not null`, so neither walk steps over the other's rows, and a message backing off
     * (turn null) is never read by this one.
     */
    index('outbox_pending_turn_idx')
      .on(t.priority.desc(), t.turn, t.id)
      .where(sql`status = 'PENDING' and turn is not null`),
    /* A group's last turn in a priority, read by enqueue (src/outbox/turns.ts): one probe. */
    index('outbox_group_turn_idx')
      .on(t.groupId, t.priority, t.turn)
      .where(sql`status = 'PENDING' and turn is not null and group_id is not null`),
    /*
     * Per-key ordering: "is an older message of this key still pending?" is one probe here, over
     * that key's live rows. Partial on the check's own words (`not in ('DONE', 'DEAD')`), so a DONE
     * writes no entry here and the index is the queue's size, not the history's; no other index
     * can serve the check, whatever the statistics say (migrations/0010, ADR 0023). Keyless rows
     * are left out so that a lookup by id alone cannot skip-scan it (migrations/0008).
     */
    index('outbox_key_idx')
      .on(t.key, t.id)
      .where(sql`key is not null and status not in ('DONE', 'DEAD')`),
    /* The span of days that still hold PENDING messages: the claim reads its two ends. */
    index('outbox_pending_created_idx')
      .on(t.createdAt)
      .where(sql`status = 'PENDING'`),
    /* Dead letters are few and looked at by people; purge walks DONE rows by age. */
    index('outbox_dead_idx')
      .on(t.topic, t.id)
      .where(sql`status = 'DEAD'`),
    index('outbox_done_processed_idx')
      .on(t.processedAt)
      .where(sql`status = 'DONE'`),
  ],
);

/** Who replayed which dead letters, when (admin API and `npm run outbox:requeue`). */
export const outboxAudit = pgTable('outbox_audit', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  /** The admin's user id, or null for a command-line run. */
  actorUserId: bigint('actor_user_id', { mode: 'number' }).references(() => users.id),
  actor: text('actor').notNull(),
  action: text('action').notNull(),
  /** What was asked for: {ids}, {topic} or {allDead}. */
  criteria: jsonb('criteria').notNull(),
  affected: integer('affected').notNull(),
  messageIds: uuid('message_ids').array().notNull(),
  createdAt: ts('created_at').notNull().defaultNow(),
});

/**
 * The search index: derived from `properties`, rebuilt by `npm run reindex`, reached through its
 * own pool. Losing a write here is acceptable; see src/search/.
 */
export const searchDocuments = pgTable(
  'search_documents',
  {
    /** The property's public id: upserting the same document twice leaves the same index. */
    propertyId: uuid('property_id').primaryKey(),
    title: text('title').notNull(),
    description: text('description').notNull(),
    city: text('city').notNull(),
    country: char('country', { length: 2 }).notNull(),
    currency: char('currency', { length: 3 }).notNull(),
    nightlyPrice: integer('nightly_price').notNull(),
    maxGuests: integer('max_guests').notNull(),
    /** Title weighs most, then city and country, then description. */
    document: tsvector('document')
      .notNull()
      .generatedAlwaysAs(
        sql`setweight(to_tsvector('simple', coalesce(title, '')), 'A') || setweight(to_tsvector('simple', coalesce(city, '') || ' ' || coalesce(country, '')), 'B') || setweight(to_tsvector('simple', coalesce(description, '')), 'C')`,
      ),
    /** The properties.updated_at this document was built from: an older write never wins. */
    sourceUpdatedAt: ts('source_updated_at').notNull(),
    indexedAt: ts('indexed_at').notNull().defaultNow(),
  },
  (t) => [
    index('search_documents_document_idx').using('gin', t.document),
    index('search_documents_city_idx').on(sql`lower(${t.city})`),
    index('search_documents_country_idx').on(t.country),
  ],
);

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

/*
 * Webhooks to hosts' own systems (src/webhooks/). Three tables, one job each: the endpoints a host
 * registered; the booking events of each host, recorded once with the exact body every endpoint
 * is sent (so a later `recover` can send an event to an endpoint that did not have it); and one
 * delivery per (event, endpoint), with every attempt kept beside it.
 */

export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id),
    url: text('url').notNull(),
    /** Event types this endpoint receives; never empty (the API fills in every booking event type). */
    eventTypes: text('event_types').array().notNull(),
    description: text('description').notNull().default(''),
    enabled: boolean('enabled').notNull().default(true),
    /** Why it was disabled when the system did it (410 Gone, failing for too long); null when a person did. */
    disabledReason: text('disabled_reason'),
    /**
     * The signing secret, `whsec_` + base64. Kept readable because it signs every delivery (a hash
     * would not); only the host sees it, and only when it is made.
     */
    secret: text('secret').notNull(),
    /**
     * Secrets rotated out that still sign beside the current one, each until its own overlap ends:
     * `[{"secret": "whsec_…", "expiresAt": "<timestamptz>"}]`. A second rotation inside the overlap
     * keeps the first secret too (a receiver may not have deployed the second yet).
     */
    retiredSecrets: jsonb('retired_secrets')
      .notNull()
      .default(sql`'[]'::jsonb`),
    /**
     * Superseded by retired_secrets (migration 0012 moved what they held) and no longer written.
     * Kept for one release so that workers of the previous one, which still read them, run beside
     * this schema during a rollout (docs/operating.md, "Changing the schema"); dropped in the next.
     */
    previousSecret: text('previous_secret'),
    previousSecretExpiresAt: ts('previous_secret_expires_at'),
    /** First failure since the last success: the clock of WEBHOOK_DISABLE_AFTER_HOURS and the "failing" alert. */
    failingSince: ts('failing_since'),
    lastSuccessAt: ts('last_success_at'),
    lastFailureAt: ts('last_failure_at'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [index('webhook_endpoints_host_idx').on(t.hostId, t.id)],
);

/**
 * What a host may still ask for by hand (test events, retries, recovers): a token bucket per host
 * and action, refilled at WEBHOOK_MANUAL_SENDS_PER_MINUTE, taken from in one statement
 * (src/webhooks/manual-rate.ts) so concurrent requests cannot both take the last token.
 */
export const webhookHostBudgets = pgTable(
  'webhook_host_budgets',
  {
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    action: text('action').notNull(),
    tokens: doublePrecision('tokens').notNull(),
    refilledAt: ts('refilled_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.hostId, t.action] })],
);

export const webhookEvents = pgTable(
  'webhook_events',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /** The outbox message's public id for a booking event (so one event is recorded once), random for a test event. */
    publicId: uuid('public_id').notNull().unique(),
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id),
    type: text('type').notNull(),
    /** The exact JSON text that is signed and sent, the same on every attempt. */
    body: text('body').notNull(),
    occurredAt: ts('occurred_at').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
  },
  (t) => [index('webhook_events_host_occurred_idx').on(t.hostId, t.occurredAt)],
);

export const WEBHOOK_DELIVERY_STATUSES = ['pending', 'succeeded', 'failed'] as const;

export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /** Sent as `webhook-id` on every attempt: the receiver's idempotency key. */
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    eventId: bigint('event_id', { mode: 'number' })
      .notNull()
      .references(() => webhookEvents.id, { onDelete: 'cascade' }),
    endpointId: bigint('endpoint_id', { mode: 'number' })
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: 'cascade' }),
    status: text('status', { enum: WEBHOOK_DELIVERY_STATUSES }).notNull().default('pending'),
    /** Attempts in the current round (a manual retry or recover starts a new round at 0). */
    attempts: integer('attempts').notNull().default(0),
    /** When pending, the next attempt's time; while claimed, the lease deadline. */
    nextAttemptAt: ts('next_attempt_at').notNull().defaultNow(),
    /** The current claim's token: an attempt's result is written only if the claim is still its own. */
    claimId: uuid('claim_id'),
    createdAt: ts('created_at').notNull().defaultNow(),
    /** When it succeeded or failed for good. */
    finishedAt: ts('finished_at'),
    /** The W3C trace context of the fan-out that made it: its first attempt continues that trace. Null when tracing was off. */
    traceparent: text('traceparent'),
    tracestate: text('tracestate'),
  },
  (t) => [
    // One delivery per (event, endpoint): the fan-out handler can run twice and create nothing twice.
    uniqueIndex('webhook_deliveries_event_endpoint_key').on(t.eventId, t.endpointId),
    check('webhook_deliveries_status_check', sql`${t.status} in ('pending', 'succeeded', 'failed')`),
    /*
     * The sender's claim probes this once per enabled endpoint for that endpoint's first due
     * deliveries (src/webhooks/delivery/claim.ts). Partial: it holds only what can still be sent,
     * so it stays small however many delivered rows the table keeps.
     */
    index('webhook_deliveries_due_idx')
      .on(t.endpointId, t.nextAttemptAt, t.id)
      .where(sql`status = 'pending'`),
    index('webhook_deliveries_endpoint_idx').on(t.endpointId, t.id),
  ],
);

export const webhookAttempts = pgTable(
  'webhook_attempts',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    deliveryId: bigint('delivery_id', { mode: 'number' })
      .notNull()
      .references(() => webhookDeliveries.id, { onDelete: 'cascade' }),
    attemptedAt: ts('attempted_at').notNull().defaultNow(),
    /** The HTTP status, or null when no answer came (timeout, refused, address not allowed). */
    responseStatus: integer('response_status'),
    durationMs: integer('duration_ms').notNull(),
    /** The first 2 KB of the response body. */
    responseBody: text('response_body'),
    error: text('error'),
    /** The trace this attempt was recorded in (shown beside it), null when tracing was off. */
    traceId: text('trace_id'),
  },
  (t) => [index('webhook_attempts_delivery_idx').on(t.deliveryId, t.id), index('webhook_attempts_attempted_idx').on(t.attemptedAt)],
);
