import { sql } from 'drizzle-orm';
import type { Tx } from '../db/transaction.ts';
import { outbox } from '../db/schema.ts';
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
  const snapshot = JSON.parse(JSON.stringify(TOPICS[topic].parse(payload))) as unknown;
  const [row] = await tx
    .insert(outbox)
    .values({ topic, payload: snapshot, key: opts.key ?? null })
    .returning({ id: outbox.id, publicId: outbox.publicId, topic: outbox.topic });
  await tx.execute(sql`select pg_notify(${OUTBOX_CHANNEL}, ${topic})`);
  return row!;
}
