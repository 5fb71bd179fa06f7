import { sql } from 'drizzle-orm';
import { deleteExpiredIdempotencyKeys } from '../bookings/idempotency.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/client.ts';
import type { Chore } from '../outbox/index.ts';
import { deleteEndedSessions } from '../users/users.repository.ts';
import {
  deleteEndedPortalLinks,
  deleteOldPortalLinkUses,
  deleteOldWebhookAttempts,
  deleteOldWebhookDeliveries,
  deleteOldWebhookEvents,
} from '../webhooks/purge.ts';

/**
 * The application's tables the worker's housekeeping keeps small, beside the outbox's own DONE
 * purge: expired Idempotency-Keys (with their stored responses) and expired or revoked sessions,
 * which are already refused when read, so deleting them changes no answer; and the events
 * consumers' inbox and resolved dead letters, each kept as long as it can still matter
 * (INBOX_MARGIN_SECONDS, RESOLVED_DEAD_LETTER_RETENTION_DAYS); and finished webhook deliveries,
 * their attempts and events after WEBHOOK_RETENTION_DAYS, and so the webhook portal's links that
 * ended and their uses (src/webhooks/purge.ts).
 */
export function appChores(config: Pick<Config, 'EVENTS_MAX_AGE_SECONDS' | 'WEBHOOK_RETENTION_DAYS'>): readonly Chore[] {
  const webhookDays = config.WEBHOOK_RETENTION_DAYS;
  const inboxRetentionSeconds = config.EVENTS_MAX_AGE_SECONDS + INBOX_MARGIN_SECONDS;
  return [
    { name: 'idempotencyKeys', deleteBatch: deleteExpiredIdempotencyKeys },
    { name: 'sessions', deleteBatch: deleteEndedSessions },
    { name: 'processedMessages', deleteBatch: (db, batchSize) => deleteOldProcessedMessages(db, inboxRetentionSeconds, batchSize) },
    {
      name: 'consumerDeadLetters',
      deleteBatch: (db, batchSize) => deleteResolvedDeadLetters(db, RESOLVED_DEAD_LETTER_RETENTION_DAYS, batchSize),
    },
    { name: 'webhookAttempts', deleteBatch: (db, batchSize) => deleteOldWebhookAttempts(db, webhookDays, batchSize) },
    { name: 'webhookDeliveries', deleteBatch: (db, batchSize) => deleteOldWebhookDeliveries(db, webhookDays, batchSize) },
    { name: 'webhookEvents', deleteBatch: (db, batchSize) => deleteOldWebhookEvents(db, webhookDays, batchSize) },
    { name: 'portalLinkUses', deleteBatch: (db, batchSize) => deleteOldPortalLinkUses(db, webhookDays, batchSize) },
    { name: 'portalLinks', deleteBatch: (db, batchSize) => deleteEndedPortalLinks(db, webhookDays, batchSize) },
  ];
}

/**
 * A processed_messages row is what makes a redelivered event a no-op (src/events/inbox.ts). The
 * stream keeps an event EVENTS_MAX_AGE_SECONDS after it was published and can deliver it again
 * until then (an ack lost, `--replay --from` a time); it was published before it was processed,
 * so a row kept that long after processed_at outlives every copy the stream can hand out. The
 * margin covers the clocks of nats-server and PostgreSQL disagreeing, and a stream whose max age
 * was raised before the workers' setting followed.
 */
export const INBOX_MARGIN_SECONDS = 24 * 3600;

/**
 * A dead letter replayed (replayed_at set) has done its work; it is kept a month for whoever looks
 * into why events failed, then deleted. Open dead letters are never deleted: they are events not
 * applied yet.
 */
export const RESOLVED_DEAD_LETTER_RETENTION_DAYS = 30;

/*
 * Neither table has an index on its age column: each batch scans until it has its rows, and the
 * round's last, short batch reads the table once (every HOUSEKEEPING_INTERVAL_SECONDS). SKIP
 * LOCKED: two workers sweeping at once never wait on each other.
 */

/**
 * Deletes up to `batchSize` inbox rows processed more than `retentionSeconds` ago. Never the row of
 * an event that also has an OPEN dead letter in its group: replaying that dead letter later must
 * still find it applied, or it would be applied twice.
 */
export async function deleteOldProcessedMessages(db: Db, retentionSeconds: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from processed_messages
     where (consumer_group, message_id) in (
            select p.consumer_group, p.message_id from processed_messages p
             where p.processed_at < now() - make_interval(secs => ${retentionSeconds})
               and not exists (select 1 from consumer_dead_letters d
                                where d.consumer_group = p.consumer_group and d.message_id = p.message_id
                                  and d.replayed_at is null)
             limit ${batchSize}
               for update of p skip locked)`);
  return res.rowCount ?? 0;
}

/** Deletes up to `batchSize` dead letters replayed more than `retentionDays` ago. */
export async function deleteResolvedDeadLetters(db: Db, retentionDays: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from consumer_dead_letters
     where id in (select id from consumer_dead_letters
                   where replayed_at < now() - make_interval(days => ${retentionDays})
                   limit ${batchSize}
                     for update skip locked)`);
  return res.rowCount ?? 0;
}
