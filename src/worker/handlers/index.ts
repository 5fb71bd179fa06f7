import type { Config } from '../../config.ts';
import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import type { Mailer } from '../../mail/mailer.ts';
import type { SearchIndex } from '../../search/search-index.ts';
import type { Handler } from '../registry.ts';
import { guestCancellation, guestConfirmation, hostCancellation, hostNewBooking } from './booking-emails.ts';
import { searchIndexPropertyHandler } from './search-index-property.ts';
import { eventsRelayHandlers } from './events-relay.ts';

/** What handlers may use. Built once by the worker's entry point (src/worker/drain-outbox.ts). */
export interface HandlerDeps {
  config: Config;
  /** The worker's pool. A handler that writes to the database does so in its own short transaction. */
  db: Db;
  mailer: Mailer;
  logger: Logger;
  /** The search index, on its own pool (SEARCH_DATABASE_URL, SEARCH_STATEMENT_TIMEOUT_MS). */
  searchIndex: SearchIndex;
}

/**
 * Every handler the worker runs, as an explicit list. A handler is registered by adding a line
 * here and nowhere else: no import side effects, so a forgotten import cannot silently leave a
 * topic without handlers (`npm run drain-outbox -- --list-topics` prints what this list gives).
 * A topic with no handler here stays PENDING until one is added.
 */
export function defaultHandlers(deps: HandlerDeps): Handler<any>[] {
  return [
    guestConfirmation(deps),
    hostNewBooking(deps),
    guestCancellation(deps),
    hostCancellation(deps),
    searchIndexPropertyHandler(deps),
    // Events for other services: only when NATS_URL is set (src/worker/handlers/events-relay.ts).
    ...(deps.config.NATS_URL ? eventsRelayHandlers(deps) : []),
  ];
}
