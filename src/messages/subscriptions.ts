import type { TopicName } from './topics.ts';

/**
 * The worker's subscriptions as plain data: which handler (by its stable name) handles which
 * topic, in the order the worker runs them. One list, read by both sides:
 *   - the worker builds its registry from it (src/worker/handlers/index.ts maps each name to the
 *     code that implements it, and refuses to start on a name without code);
 *   - the API (admin views, metrics) reads it to know which topics are handled and by whom,
 *     without building a handler or importing what handlers use (nodemailer, the search index).
 *
 * A name is recorded per message in outbox.handlers_done: renaming one re-runs it on messages
 * that are still pending. The events relay is not listed: each worker adds it from its own
 * configuration (NATS_URL, EVENTS_TOPICS), so the API cannot know it statically.
 */
export const SUBSCRIPTIONS = [
  { name: 'email.guest-confirmation', topic: 'booking.created' },
  { name: 'email.host-new-booking', topic: 'booking.created' },
  { name: 'email.guest-cancellation', topic: 'booking.cancelled' },
  { name: 'email.host-cancellation', topic: 'booking.cancelled' },
  { name: 'search.index-property', topic: 'property.changed' },
  { name: 'webhooks.booking-created', topic: 'booking.created' },
  { name: 'webhooks.booking-cancelled', topic: 'booking.cancelled' },
  { name: 'email.host-webhook-disabled', topic: 'webhook.endpoint-disabled' },
] as const satisfies readonly Subscription[];

interface Subscription {
  readonly name: string;
  readonly topic: TopicName;
}

export type SubscriptionName = (typeof SUBSCRIPTIONS)[number]['name'];
