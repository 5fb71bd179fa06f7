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

export interface Subscription {
  readonly name: string;
  readonly topic: TopicName;
}

export type SubscriptionName = (typeof SUBSCRIPTIONS)[number]['name'];

/**
 * Lookups over a list of subscriptions: which topics have at least one handler (a pending message
 * of any other topic is an "unknown topic" the worker leaves alone) and the handler names per topic
 * (for the per-handler state of a message, next to `handlers_done`).
 *
 * The API and the worker are deployed together from this tree; during a rolling deploy the API's
 * view can briefly differ from the running worker's.
 */
export class HandlerCatalogue {
  private readonly byTopic = new Map<string, string[]>();

  constructor(subscriptions: readonly { name: string; topic: string }[]) {
    for (const s of subscriptions) this.byTopic.set(s.topic, [...(this.byTopic.get(s.topic) ?? []), s.name]);
  }

  /** Handler names for a topic; empty for a topic nobody handles. */
  handlersFor(topic: string): string[] {
    return this.byTopic.get(topic) ?? [];
  }

  isHandled(topic: string): boolean {
    return this.byTopic.has(topic);
  }

  /** Topics with at least one handler, sorted. */
  topics(): string[] {
    return [...this.byTopic.keys()].sort();
  }
}

/** The catalogue of SUBSCRIPTIONS, built once. */
export const HANDLER_CATALOGUE = new HandlerCatalogue(SUBSCRIPTIONS);
