import { sql } from 'drizzle-orm';
import type { Tx } from '../db/transaction.ts';

/**
 * Claims (group, message id) in the caller's transaction. True: first time, apply the effect in
 * this same transaction. False: this group already committed this event's effect; do nothing.
 *
 * ON CONFLICT DO NOTHING rather than a SELECT first: two deliveries of one event processed at the
 * same moment (a redelivery racing a slow first attempt on another instance) both try the insert;
 * the second blocks on the first's uncommitted row and then sees the conflict, so only one applies.
 */
export async function claimInbox(tx: Tx, group: string, messageId: string, streamSeq: number | null): Promise<boolean> {
  const { rows } = await tx.execute(sql`
    insert into processed_messages (consumer_group, message_id, stream_seq)
    values (${group}, ${messageId}, ${streamSeq})
    on conflict do nothing
    returning 1`);
  return rows.length === 1;
}

/** Forgets everything a group has seen (a full replay starts from an empty inbox and an empty ledger). */
export async function clearInbox(tx: Tx, group: string): Promise<number> {
  const r = await tx.execute(sql`delete from processed_messages where consumer_group = ${group}`);
  return r.rowCount ?? 0;
}
