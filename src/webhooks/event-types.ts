/**
 * What a webhook endpoint can subscribe to, and the per-booking `version` each event carries: a
 * receiver keeps the highest version it has seen per booking and ignores an older state that
 * arrives after a newer one (deliveries of different events are not ordered).
 */
export const WEBHOOK_EVENT_TYPES = ['booking.created', 'booking.cancelled'] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** Sent by `POST /webhooks/endpoints/:id/test` to that endpoint only; nobody subscribes to it. */
export const TEST_EVENT_TYPE = 'webhook.test';

export const BOOKING_VERSION: Record<WebhookEventType, number> = {
  'booking.created': 1,
  'booking.cancelled': 2,
};
