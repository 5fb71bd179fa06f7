import type { Db } from '../../db/client.ts';
import type { TopicHandler } from '../../messages/handler.ts';
import { recordBookingEvent } from '../../webhooks/fan-out.ts';

export interface WebhooksFanOutDeps {
  db: Db;
  /** The sender in this process, woken when deliveries were written (others find them at their next poll). */
  webhooks?: { wake(): void };
}

/**
 * booking.created / booking.cancelled → a delivery per subscribed endpoint of the property's host.
 * Only database writes: the HTTP calls are the webhook sender's (src/webhooks/delivery/), so a host's
 * slow server never holds an outbox slot or the booking's other handlers.
 */
function fanOut<T extends 'booking.created' | 'booking.cancelled'>(deps: WebhooksFanOutDeps, topic: T, name: string): TopicHandler<T> {
  return {
    name,
    topic,
    async handle({ payload, messageId, occurredAt, log }) {
      const created = await recordBookingEvent(deps.db, { type: topic, eventId: messageId, occurredAt, payload });
      if (created > 0) {
        log.debug({ deliveries: created }, 'webhook deliveries written');
        deps.webhooks?.wake();
      }
    },
  };
}

export const webhooksBookingCreated = (d: WebhooksFanOutDeps) => fanOut(d, 'booking.created', 'webhooks.booking-created');
export const webhooksBookingCancelled = (d: WebhooksFanOutDeps) => fanOut(d, 'booking.cancelled', 'webhooks.booking-cancelled');
