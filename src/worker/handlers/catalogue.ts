import type { TopicName } from '../../outbox/topics.ts';

/**
 * The worker's subscriptions as plain data: each handler's name and topic, in the order of
 * `defaultHandlers` (./index.ts). The API reads this (src/admin/handler-catalogue.ts) to know which
 * topics are handled and by whom, without building the handlers or importing what they use
 * (nodemailer, the search index). Imports nothing but a type, on purpose.
 *
 * Keep it beside ./index.ts: adding a handler there means adding its line here.
 * test/unit/handler-catalogue.test.ts fails when the two differ.
 */
export const HANDLER_CATALOGUE: readonly { readonly name: string; readonly topic: TopicName }[] = [
  { name: 'email.guest-confirmation', topic: 'booking.created' },
  { name: 'email.host-new-booking', topic: 'booking.created' },
  { name: 'email.guest-cancellation', topic: 'booking.cancelled' },
  { name: 'email.host-cancellation', topic: 'booking.cancelled' },
  { name: 'search.index-property', topic: 'property.changed' },
];
