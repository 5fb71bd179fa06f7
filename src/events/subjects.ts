import type { TopicName } from '../messages/topics.ts';

/*
 * What an outbox event looks like once it is in the log: its subject, its headers and its body.
 * The relay (relay.ts, for the worker's handler and the backfill) writes this shape; consumers
 * (consumer.ts) read it.
 */

/** `stayhub.booking.created`: topics are already dot-separated, so the subject is prefix + topic. */
export function subjectFor(prefix: string, topic: string): string {
  return `${prefix}.${topic}`;
}

/** Everything under the prefix: the stream's subject filter. */
export function streamSubjects(prefix: string): string[] {
  return [`${prefix}.>`];
}

/**
 * The version of each topic's published body. Bump a topic's number when its body changes in a way
 * a consumer must know about (a field removed or its meaning changed); adding a field is not one.
 */
export const SCHEMA_VERSIONS: Record<TopicName, number> = {
  'booking.created': 1,
  'booking.cancelled': 1,
  'property.changed': 1,
  'webhook.endpoint-disabled': 1,
};

/** Header names. Nats-Msg-Id (the outbox id again) is the one the server deduplicates on. */
export const HEADERS = {
  msgId: 'Nats-Msg-Id',
  topic: 'StayHub-Topic',
  key: 'StayHub-Key',
  outboxId: 'StayHub-Outbox-Id',
  occurredAt: 'StayHub-Occurred-At',
  schemaVersion: 'StayHub-Schema-Version',
} as const;

/**
 * Contact details stay home. The log is kept for days (EVENTS_MAX_AGE_SECONDS) and read by
 * services that need amounts and ids, not a guest's email address; a consumer that needs a person
 * asks the API. (The outbox row itself keeps them: the email handlers need them.)
 */
const PRIVATE_FIELDS = new Set(['guestEmail', 'guestName', 'hostEmail', 'hostName']);

export function publicBody(payload: unknown): unknown {
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return payload;
  return Object.fromEntries(Object.entries(payload).filter(([k]) => !PRIVATE_FIELDS.has(k)));
}
