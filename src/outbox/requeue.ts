import type { Db } from '../db/client.ts';
import { runAfterCommit, withTransaction } from '../db/transaction.ts';
import { wakeUpSaying } from './wake-up.ts';
import { executorOf, run, statement, type Statement } from './executor.ts';

export type RequeueCriteria = { ids: string[] } | { topic: string } | { allDead: true };

export interface RequeueResult {
  affected: number;
  messageIds: string[];
}

/** The DEAD rows chosen by `where` ($1, when it has one) back to PENDING. */
const requeue = (name: string, where: string): Statement =>
  statement(
    name,
    `update outbox
        set status = 'PENDING', attempts = 0, available_at = now(), turn = null, claim_id = null,
            claimed_at = null, leased_until = null, processed_at = null
      where status = 'DEAD' and ${where}
     returning public_id`,
  );

// By public id among the DEAD rows: outbox_dead_idx holds them all, and dead letters are few, so
// no index on public_id is needed (there is none: public-id.ts).
const REQUEUE_IDS = requeue('outbox-requeue-ids', 'public_id = any($1::uuid[])');
const REQUEUE_TOPIC = requeue('outbox-requeue-topic', 'topic = $1');
const REQUEUE_ALL = requeue('outbox-requeue-all', 'true');

const RECORD = statement(
  'outbox-audit-requeue',
  `insert into outbox_audit (actor_user_id, actor, action, criteria, affected, message_ids)
   values ($1, $2, $3, $4::jsonb, $5, $6::uuid[])`,
);

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
  const [chosen, values]: [Statement, unknown[]] =
    'ids' in criteria ? [REQUEUE_IDS, [criteria.ids]] : 'topic' in criteria ? [REQUEUE_TOPIC, [criteria.topic]] : [REQUEUE_ALL, []];
  return withTransaction(db, async (tx) => {
    const q = executorOf(tx);
    const rows = await run<{ public_id: string }>(q, chosen, values);
    const messageIds = rows.map((r) => r.public_id);
    await run(q, RECORD, [actor.userId ?? null, actor.label, 'requeue', JSON.stringify(criteria), messageIds.length, messageIds]);
    if (messageIds.length) {
      runAfterCommit(tx, 'outbox-notify:requeue', (after) => wakeUpSaying(executorOf(after), 'requeue'));
    }
    return { affected: messageIds.length, messageIds };
  });
}
