import type { Config } from '../../config.ts';
import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import type { Mailer } from '../../mail/mailer.ts';
import type { TopicHandler } from '../../messages/handler.ts';
import { SUBSCRIPTIONS, type SubscriptionName } from '../../messages/subscriptions.ts';
import type { SearchIndex } from '../../search/search-index.ts';
import { guestCancellation, guestConfirmation, hostCancellation, hostNewBooking, hostWebhookDisabled } from './booking-emails.ts';
import { eventsRelayHandlers } from './events-relay.ts';
import { searchIndexPropertyHandler } from './search-index-property.ts';
import { webhooksBookingCancelled, webhooksBookingCreated } from './webhooks-fan-out.ts';

/** What handlers may use. Built once by the worker's entry point (src/commands/drain-outbox.ts). */
export interface HandlerDeps {
  config: Config;
  /** The worker's pool. A handler that writes to the database does so in its own short transaction. */
  db: Db;
  mailer: Mailer;
  logger: Logger;
  /** The search index, on its own pool (SEARCH_DATABASE_URL, SEARCH_STATEMENT_TIMEOUT_MS). */
  searchIndex: SearchIndex;
  /** The webhook sender of this process, if it runs one: woken when deliveries are written. */
  webhooks?: { wake(): void };
}

/**
 * The code behind each subscription name of src/messages/subscriptions.ts. The type makes a name
 * without code a compile error; a handler is added by a line there and its factory here, and
 * nothing else: no import side effects, so a forgotten import cannot silently leave a topic
 * without handlers (`npm run drain-outbox -- --list-topics` prints what this gives).
 */
const IMPLEMENTATIONS: { readonly [N in SubscriptionName]: (deps: HandlerDeps) => TopicHandler<any> } = {
  'email.guest-confirmation': guestConfirmation,
  'email.host-new-booking': hostNewBooking,
  'email.guest-cancellation': guestCancellation,
  'email.host-cancellation': hostCancellation,
  'search.index-property': searchIndexPropertyHandler,
  'webhooks.booking-created': webhooksBookingCreated,
  'webhooks.booking-cancelled': webhooksBookingCancelled,
  'email.host-webhook-disabled': hostWebhookDisabled,
};

/** Every handler the worker runs: the subscriptions in their order, then the events relay when NATS_URL is set. */
export function defaultHandlers(deps: HandlerDeps): TopicHandler<any>[] {
  const handlers = SUBSCRIPTIONS.map((s) => {
    const handler = IMPLEMENTATIONS[s.name](deps);
    if (handler.name !== s.name || handler.topic !== s.topic) {
      throw new Error(`handler ${s.name} (${s.topic}) is implemented as ${handler.name} (${handler.topic})`);
    }
    return handler;
  });
  return [...handlers, ...(deps.config.NATS_URL ? eventsRelayHandlers(deps) : [])];
}
