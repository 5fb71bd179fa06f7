import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';

/*
 * WEBHOOK_RETENTION_DAYS: what the worker's housekeeping deletes, a batch at a time (SKIP LOCKED,
 * like its other chores). A pending delivery is never deleted, however old: it is owed. An event
 * goes once no delivery refers to it, so a recover can still send it until then.
 */

/** Attempts older than the retention, of deliveries that are finished (a pending one keeps its history). */
export async function deleteOldWebhookAttempts(db: Db, retentionDays: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from webhook_attempts where id in (
      select a.id from webhook_attempts a join webhook_deliveries d on d.id = a.delivery_id
       where a.attempted_at < now() - make_interval(days => ${retentionDays}) and d.status <> 'pending'
       limit ${batchSize} for update of a skip locked)`);
  return res.rowCount ?? 0;
}

/** Deliveries that succeeded or failed longer ago than the retention (their attempts go with them). */
export async function deleteOldWebhookDeliveries(db: Db, retentionDays: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from webhook_deliveries where id in (
      select id from webhook_deliveries
       where status <> 'pending' and finished_at < now() - make_interval(days => ${retentionDays})
       limit ${batchSize} for update skip locked)`);
  return res.rowCount ?? 0;
}

/** Events older than the retention that no delivery refers to any more. */
export async function deleteOldWebhookEvents(db: Db, retentionDays: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from webhook_events where id in (
      select ev.id from webhook_events ev
       where ev.occurred_at < now() - make_interval(days => ${retentionDays})
         and not exists (select 1 from webhook_deliveries d where d.event_id = ev.id)
       limit ${batchSize} for update skip locked)`);
  return res.rowCount ?? 0;
}
