import { z } from 'zod';

export const eventGroup = z.object({
  /** The group's name: its durable consumer's on the stream, and its inbox's and dead letters' in PostgreSQL. */
  name: z.string(),
  /** Events in the stream the group has not been given yet. */
  pending: z.number().int(),
  /** Events given to a process of the group and not acked yet. */
  ackPending: z.number().int(),
  /** How long the oldest event the group has not acked has been in the stream, in seconds; 0 when caught up. */
  oldestUnackedAgeSeconds: z.number(),
  /** Events the group gave up on (consumer_dead_letters) and nobody has replayed yet. */
  openDeadLetters: z.number().int(),
});

export const eventGroupsResponse = z.object({
  /** False when NATS_URL is not set: there is no events relay, so no stream and no groups. */
  configured: z.boolean(),
  /** EVENTS_STREAM; `exists` is false until the worker has created it. Null when not configured. */
  stream: z.object({ name: z.string(), exists: z.boolean(), messages: z.number().int() }).nullable(),
  groups: z.array(eventGroup),
  generatedAt: z.string(),
});
export type EventGroupsResponse = z.infer<typeof eventGroupsResponse>;
