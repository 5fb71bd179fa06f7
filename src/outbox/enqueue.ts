import { sql } from 'drizzle-orm';
import type { Tx } from '../db/transaction.ts';
import { OUTBOX_CHANNEL, TOPICS, type PayloadOf, type TopicName } from './topics.ts';

export interface EnqueuedMessage {
  id: number;
  publicId: string;
  topic: string;
}

/**
 * Writes an event into the outbox as part of the caller's transaction.
 *
 * It takes a transaction (`Tx`), not a pool: an event cannot be written outside one. And it never
 * commits: the caller's COMMIT is the single boundary that makes the business change and its event
 * exist together, or neither. A commit in here would reopen the gap the outbox exists to close.
 *
 * The payload is validated against its topic's schema and stored as a JSON snapshot. The
 * pg_notify in the same transaction is delivered only at COMMIT (and never after a rollback), so
 * the worker is woken exactly when the message becomes visible.
 */
export async function enqueue<T extends TopicName>(
  tx: Tx,
  topic: T,
  payload: PayloadOf<T>,
  opts: { key?: string } = {},
): Promise<EnqueuedMessage> {
  const snapshot = JSON.stringify(TOPICS[topic].parse(payload));
  // The insert and its notify in one statement: one round trip on every producer's hot path.
  const { rows } = await tx.execute<{ id: string; public_id: string; topic: string }>(sql`
    with ins as (
      insert into outbox (topic, payload, key)
      values (${topic}, ${snapshot}::jsonb, ${opts.key ?? null})
      returning id, public_id, topic
    )
    select id, public_id, topic, pg_notify(${OUTBOX_CHANNEL}, topic) from ins`);
  const row = rows[0]!;
  return { id: Number(row.id), publicId: row.public_id, topic: row.topic };
}
