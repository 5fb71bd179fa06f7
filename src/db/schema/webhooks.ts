import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';
import { ts } from './columns.ts';
import { users } from './users.ts';

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
    /**
     * Attempts that may start per second, across every worker; null: no limit. Nullable so that a
     * worker of the previous release, which neither reads nor writes it, runs beside this schema.
     */
    rateLimitPerSecond: integer('rate_limit_per_second'),
    /**
     * When the endpoint's next attempt may start at the earliest (the rate's schedule): the claim
     * moves it forward by 1/rate for every delivery it takes (src/webhooks/delivery/claim.ts).
     */
    rateNextAt: ts('rate_next_at'),
    /** First failure since the last success: the clock of WEBHOOK_DISABLE_AFTER_HOURS and the "failing" alert. */
    failingSince: ts('failing_since'),
    lastSuccessAt: ts('last_success_at'),
    lastFailureAt: ts('last_failure_at'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    index('webhook_endpoints_host_idx').on(t.hostId, t.id),
    check('webhook_endpoints_rate_limit_range', sql`${t.rateLimitPerSecond} between 1 and 1000`),
  ],
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
    /**
     * What the receiver got and answered in its head: `{"request": {webhook-id, webhook-timestamp,
     * webhook-signature}, "response": {"headers": [{name, value, omittedBytes?}], "omitted": n} | null}`,
     * bounded (src/webhooks/delivery/exchanged-headers.ts). Null for attempts recorded before it
     * was kept, and for those of a worker of the previous release during a rollout.
     */
    headers: jsonb('headers'),
  },
  (t) => [index('webhook_attempts_delivery_idx').on(t.deliveryId, t.id), index('webhook_attempts_attempted_idx').on(t.attemptedAt)],
);
