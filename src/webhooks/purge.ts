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

/*
 * Portal links (src/webhooks/portal-links.*.ts) and their uses: the host's record of who read its
 * webhooks with a link, kept as long as the deliveries such a reader could have seen. Neither
 * table has an index on its age column: like the chores above, a batch scans until it has its
 * rows, once a housekeeping round.
 */

/** Uses of portal links (live ones included) made longer ago than the retention. */
export async function deleteOldPortalLinkUses(db: Db, retentionDays: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from webhook_portal_link_uses where id in (
      select id from webhook_portal_link_uses
       where at < now() - make_interval(days => ${retentionDays})
       limit ${batchSize} for update skip locked)`);
  return res.rowCount ?? 0;
}

/**
 * Links that expired or were revoked longer ago than the retention; what is left of their uses (a
 * refused try after the end) goes with them. Until then an ended link stays listed, with its uses,
 * for the host to see who used it and when.
 */
export async function deleteEndedPortalLinks(db: Db, retentionDays: number, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from webhook_portal_links where id in (
      select id from webhook_portal_links
       where least(expires_at, revoked_at) < now() - make_interval(days => ${retentionDays})
       limit ${batchSize} for update skip locked)`);
  return res.rowCount ?? 0;
}
