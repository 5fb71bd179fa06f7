import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { runAfterCommit, withTransaction } from '../db/transaction.ts';
import { outboxAudit } from './schema.ts';
import { OUTBOX_CHANNEL } from './channel.ts';

export type RequeueCriteria = { ids: string[] } | { topic: string } | { allDead: true };

export interface RequeueResult {
  affected: number;
  messageIds: string[];
}

/**
 * Puts DEAD messages back to PENDING with attempts reset, so they get a full set of retries, and
 * records who did it in outbox_audit, all in one transaction: either the replay and its record
 * exist, or neither. Only DEAD rows are touched: a PENDING or DONE message named by id is left as
 * it is (replaying a DONE message would repeat its effects). handlers_done is kept, so a message
 * whose guest email went out and host email died re-sends only the host email.
 *
 * The worker's wake-up is sent after COMMIT, for the reasons `enqueue` gives (src/outbox/enqueue.ts:
 * a NOTIFY inside the transaction holds the cluster-wide notification lock through the commit);
 * the payload says why it woke. If it is lost, the worker's poll finds the messages.
 */
export async function requeueDead(db: Db, criteria: RequeueCriteria, actor: { userId?: number; label: string }): Promise<RequeueResult> {
  const where =
    'ids' in criteria
      ? sql`public_id = any(${sql.param(criteria.ids)}::uuid[])`
      : 'topic' in criteria
        ? sql`topic = ${criteria.topic}`
        : sql`true`;
  return withTransaction(db, async (tx) => {
    const { rows } = await tx.execute<{ public_id: string }>(sql`
      update outbox
         set status = 'PENDING', attempts = 0, available_at = now(), turn = null, claim_id = null,
             claimed_at = null, leased_until = null, processed_at = null
       where status = 'DEAD' and ${where}
      returning public_id`);
    const messageIds = rows.map((r) => r.public_id);
    await tx.insert(outboxAudit).values({
      actorUserId: actor.userId ?? null,
      actor: actor.label,
      action: 'requeue',
      criteria,
      affected: messageIds.length,
      messageIds,
    });
    if (messageIds.length) {
      runAfterCommit(tx, 'outbox-notify:requeue', (after) => after.execute(sql`select pg_notify(${OUTBOX_CHANNEL}, 'requeue')`));
    }
    return { affected: messageIds.length, messageIds };
  });
}
