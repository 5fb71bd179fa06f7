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
  /**
   * Its next event is older than the stream's first: events it had not read aged out (or were
   * deleted) before it read them. Its ledger misses them until rebuilt (docs/operating.md#eventsconsumereventsagedout).
   */
  eventsAgedOut: z.boolean(),
});

export const eventGroupsResponse = z.object({
  /** False when NATS_URL is not set: there is no events relay, so no stream and no groups. */
  configured: z.boolean(),
  /**
   * EVENTS_STREAM; `exists` is false until the worker has created it. `firstSeq` and `firstAt`:
   * the first event it still holds (0 and null when it holds none); the ones before it aged out
   * (EVENTS_MAX_AGE_SECONDS) or were removed. Null when not configured.
   */
  stream: z
    .object({
      name: z.string(),
      exists: z.boolean(),
      messages: z.number().int(),
      firstSeq: z.number().int(),
      firstAt: z.string().nullable(),
    })
    .nullable(),
  groups: z.array(eventGroup),
  generatedAt: z.string(),
});
export type EventGroupsResponse = z.infer<typeof eventGroupsResponse>;
