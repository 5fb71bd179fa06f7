import type * as outbox from '../outbox/index.ts';
import type { PayloadOf, TopicName } from './topics.ts';

/*
 * The outbox's handler types, typed by the topic catalogue (./topics.ts): a handler of
 * 'booking.created' is given that topic's payload, as its schema parsed it.
 */

/** What a handler of topic T is given (src/outbox/runner/registry.ts). */
export type TopicHandlerContext<T extends TopicName> = outbox.HandlerContext<PayloadOf<T>, T>;

/** A handler of topic T: a stable name, the topic, and what it does with each message. */
export type TopicHandler<T extends TopicName = TopicName> = outbox.Handler<PayloadOf<T>, T>;
