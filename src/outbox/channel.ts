/** The channel enqueue notifies and the worker LISTENs on: the payload is the topic. */
export const OUTBOX_CHANNEL = 'outbox';
