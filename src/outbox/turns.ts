import { TOPIC_PRIORITY } from './topics.ts';

/*
 * What enqueue writes beside a message so that the claim can order it (ADR 0033, src/outbox/claim.ts):
 *
 * - `priority`, its topic's, as the application registered it (TOPIC_PRIORITY, src/outbox/topics.ts).
 *   The outbox knows no topic's meaning: only that a higher number is claimed first.
 * - `group_id`, whose work it is (a host's public id), as the caller passes it. The outbox knows no
 *   host either: a group is a string whose messages take turns with other groups'.
 * - `turn`, from outbox_turn(group, priority) (migrations/0014_fair_claim_order.sql), in the same
 *   statement as the INSERT: the later of the head of the priority's queue and the group's latest
 *   turn + 1. Two index probes, no lock, no counter row that writers would queue on: a producer of
 *   one group never waits for another, nor for itself beyond its own transaction.
 *
 * Rows written without a turn (the bench's and tests' bulk inserts, lane messages, anything written
 * by SQL of its own) are claimed oldest first beside the turns, as every message was before.
 */

/** A topic's priority: what the application registered, 0 for a topic it did not list. */
export function priorityOf(topic: string): number {
  return (TOPIC_PRIORITY as Readonly<Record<string, number | undefined>>)[topic] ?? 0;
}
