import { z } from 'zod';
import { WEBHOOK_DELIVERY_STATUSES } from '../db/schema.ts';
import { displayText } from '../validation.ts';
import { TEST_EVENT_TYPE, WEBHOOK_EVENT_TYPES } from './event-types.ts';
import { hasCredentials } from './redact-url.ts';

/*
 * The webhooks API's shapes: validation, the TS types and the OpenAPI document come from here.
 * Whether a URL's host is a public address needs DNS, so that check is the service's
 * (webhooks.service.ts); what can be said from the text alone is said here.
 */

const endpointUrl = z
  .string()
  .trim()
  .max(2048)
  .url()
  .refine((v) => URL.canParse(v) && /^https?:$/.test(new URL(v).protocol), 'must be an http or https URL')
  // A password in a URL is shown wherever the URL is (API answers, dashboard, emails, logs of
  // whoever reads them): a receiver that wants one checks our signature instead.
  .refine((v) => !hasCredentials(v), 'must not contain a user name or password: verify the webhook-signature header instead')
  .describe('Where deliveries are POSTed. Must resolve to public internet addresses only (no loopback, private or link-local).');

const eventTypes = z
  .array(z.enum(WEBHOOK_EVENT_TYPES))
  .min(1)
  .max(WEBHOOK_EVENT_TYPES.length)
  .refine((v) => new Set(v).size === v.length, 'must not list a type twice')
  .describe(`Which events to receive: ${WEBHOOK_EVENT_TYPES.join(', ')}. Default: all of them.`);

const description = displayText(0, 500);

const rateLimitPerSecond = z
  .number()
  .int()
  .min(1)
  .max(1000)
  .nullable()
  .describe(
    'At most this many delivery attempts start per second for this endpoint, across every worker; null: no limit (the default). Deliveries held back by it wait their turn, in order, and are not counted as failed attempts.',
  );

export const createEndpointBody = z.strictObject({
  url: endpointUrl,
  eventTypes: eventTypes.optional(),
  description: description.optional(),
  rateLimitPerSecond: rateLimitPerSecond.optional(),
});
export type CreateEndpointBody = z.infer<typeof createEndpointBody>;

export const updateEndpointBody = z
  .strictObject({
    url: endpointUrl.optional(),
    eventTypes: eventTypes.optional(),
    description: description.optional(),
    enabled: z.boolean().optional().describe('true re-enables an endpoint the system disabled; its failing clock starts afresh.'),
    rateLimitPerSecond: rateLimitPerSecond.optional(),
  })
  .refine((b) => Object.keys(b).length > 0, 'must change at least one of url, eventTypes, description, enabled, rateLimitPerSecond');
export type UpdateEndpointBody = z.infer<typeof updateEndpointBody>;

export const endpointHealth = z.object({
  state: z.enum(['healthy', 'failing', 'disabled', 'unused']),
  failingSince: z.string().nullable(),
  lastSuccessAt: z.string().nullable(),
  lastFailureAt: z.string().nullable(),
  pendingDeliveries: z.number().int(),
  oldestPendingAt: z.string().nullable(),
  failedDeliveries: z.number().int().describe('Failed for good and not retried, within WEBHOOK_RETENTION_DAYS.'),
});

export const endpointResponse = z.object({
  id: z.string().uuid(),
  url: z.string(),
  eventTypes: z.array(z.string()),
  description: z.string(),
  enabled: z.boolean(),
  disabledReason: z.string().nullable(),
  rateLimitPerSecond: z.number().int().nullable().describe('Attempts that may start per second; null: no limit.'),
  createdAt: z.string(),
  updatedAt: z.string(),
  health: endpointHealth,
});
export type EndpointResponse = z.infer<typeof endpointResponse>;

export const endpointWithSecretResponse = endpointResponse.extend({
  secret: z.string().describe('whsec_… Shown now and on rotation only: keep it; it verifies our signatures.'),
});

export const endpointListResponse = z.object({ items: z.array(endpointResponse), nextCursor: z.string().nullable() });

export const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  cursor: z.string().max(200).optional(),
});

/** Every type a delivery can carry: the booking types and the test event. */
export const DELIVERY_EVENT_TYPES = [...WEBHOOK_EVENT_TYPES, TEST_EVENT_TYPE] as const;

export const listDeliveriesQuery = listQuery.extend({
  status: z.enum(WEBHOOK_DELIVERY_STATUSES).optional(),
  eventType: z.enum(DELIVERY_EVENT_TYPES).optional().describe('Only deliveries of this event type.'),
  since: z.iso.datetime({ offset: true }).optional().describe('Only deliveries created at or after this time.'),
  until: z.iso.datetime({ offset: true }).optional().describe('Only deliveries created before this time.'),
});

export const attemptResponse = z.object({
  at: z.string(),
  responseStatus: z.number().int().nullable(),
  durationMs: z.number().int(),
  responseBody: z.string().nullable().describe('The first 2 KB of the answer.'),
  error: z.string().nullable(),
  traceId: z.string().nullable().describe('The trace this attempt was made in (StayHub tracing on), as in its traceparent header.'),
});

export const deliveryResponse = z.object({
  id: z.string().uuid().describe('Also the webhook-id header of every attempt.'),
  endpointId: z.string().uuid(),
  eventId: z.string().uuid(),
  eventType: z.string(),
  status: z.enum(WEBHOOK_DELIVERY_STATUSES),
  createdAt: z.string(),
  finishedAt: z.string().nullable(),
  nextAttemptAt: z.string().nullable().describe('When pending: the next attempt.'),
  attempts: z.array(attemptResponse),
});
export type DeliveryResponse = z.infer<typeof deliveryResponse>;

export const deliveryListResponse = z.object({ items: z.array(deliveryResponse), nextCursor: z.string().nullable() });

export const recoverBody = z.strictObject({
  since: z.iso
    .datetime({ offset: true })
    .describe('Every failed delivery created since then is sent again, and every event since then the endpoint never had is sent.'),
});

export const recoverResponse = z.object({
  requeued: z.number().int().describe('Failed deliveries sent again.'),
  created: z.number().int().describe('Events the endpoint had not had (it was added or subscribed later), now on their way.'),
});

export const adminEndpointListResponse = z.object({
  items: z.array(
    endpointResponse.extend({
      hostEmail: z.string(),
      recentFailures: z.array(
        z.object({
          deliveryId: z.string().uuid(),
          eventType: z.string(),
          at: z.string(),
          responseStatus: z.number().int().nullable(),
          error: z.string().nullable(),
          traceId: z.string().nullable(),
        }),
      ),
    }),
  ),
});

export const testEventBody = z
  .strictObject({
    eventType: z
      .enum(DELIVERY_EVENT_TYPES)
      .default(TEST_EVENT_TYPE)
      .describe('webhook.test (the default), or a booking type: a sample of that event with "test": true.'),
  })
  // No body at all (as before the type could be chosen) arrives as null: a webhook.test then.
  .nullish();

export const attemptDetailResponse = attemptResponse.extend({
  requestHeaders: z
    .record(z.string(), z.string())
    .nullable()
    .describe(
      'The Standard Webhooks headers this attempt sent, exactly as the receiver got them: webhook-id, webhook-timestamp, webhook-signature. Null for an attempt recorded before they were kept.',
    ),
  responseHeaders: z
    .array(
      z.object({
        name: z.string().describe('Lower case; at most 128 bytes.'),
        value: z.string().describe('The first 1 KiB, decoded as UTF-8 (invalid bytes and NUL as U+FFFD).'),
        omittedBytes: z.number().int().optional().describe('Bytes of the value past the first KiB, left out.'),
      }),
    )
    .nullable()
    .describe(
      "The answer's first 32 headers, in the order they came. Null when no answer came, or for an attempt recorded before they were kept.",
    ),
  responseHeadersOmitted: z.number().int().describe('Headers of the answer past the first 32, left out.'),
});

export const deliveryDetailResponse = deliveryResponse.extend({
  attempts: z.array(attemptDetailResponse),
  request: z
    .object({
      method: z.literal('POST'),
      url: z.string().describe("The endpoint's URL now (redacted as everywhere)."),
      headers: z
        .record(z.string(), z.string())
        .describe(
          "The headers every attempt carries; webhook-timestamp and webhook-signature are made per attempt: see each attempt's requestHeaders.",
        ),
      body: z.string().describe('The exact body every attempt sent and signed.'),
    })
    .describe('What every attempt of this delivery sent.'),
});

export const endpointActivityResponse = z.object({
  items: z.array(
    z.object({
      endpointId: z.string().uuid(),
      lastHour: z.object({ attempts: z.number().int(), succeeded: z.number().int() }),
      lastDay: z.object({ attempts: z.number().int(), succeeded: z.number().int() }),
      inFlight: z.number().int().describe('Deliveries a sender holds now (being sent, or claimed to be sent next).'),
      lastFailure: z
        .object({
          deliveryId: z.string().uuid(),
          at: z.string(),
          responseStatus: z.number().int().nullable(),
          error: z.string().nullable(),
          responseBody: z.string().nullable().describe('The first 200 characters of the answer.'),
        })
        .nullable(),
    }),
  ),
});
