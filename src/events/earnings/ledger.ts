import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.ts';
import type { Tx } from '../../db/transaction.ts';
import { PermanentError } from '../../errors.ts';
import type { GroupHandler } from '../consumer.ts';

/*
 * The hosts' earnings ledger: per consumer group, host and currency, the total of confirmed
 * bookings minus cancellations. Kept by increments, which are not idempotent on their own: applying
 * an event twice would count it twice. The inbox (consumer.ts: the same transaction records the
 * event as seen) is what makes each event count once.
 */

/** What the ledger reads from a booking event's body (the published, contact-free body). */
const bookingBody = z.object({
  bookingId: z.string(),
  propertyId: z.string().uuid(),
  total: z.number().int().nonnegative(),
  currency: z.string().length(3),
});

/** The events this ledger reads, under the subject prefix. */
export const earningsFilter = (prefix: string) => `${prefix}.booking.>`;

/**
 * booking.created adds the total to confirmed_total; booking.cancelled adds it to cancelled_total.
 * The host is the property's (a property never changes hosts); the event carries the property, not
 * the host's identity, because the log leaves contact details out.
 */
export const applyEarningsEvent =
  (group: string): GroupHandler =>
  async (tx, event, log) => {
    if (event.topic !== 'booking.created' && event.topic !== 'booking.cancelled') return; // not ours: seen, no effect
    const parsed = bookingBody.safeParse(event.body);
    if (!parsed.success) throw new PermanentError(`earnings: ${event.topic} body does not match: ${parsed.error.issues[0]?.message}`);
    const b = parsed.data;
    const cancelled = event.topic === 'booking.cancelled';
    const { rows } = await tx.execute<{ host_id: string }>(sql`select host_id from properties where public_id = ${b.propertyId}`);
    if (!rows[0]) throw new Error(`earnings: property ${b.propertyId} not found`);
    await tx.execute(sql`
      insert into host_earnings (consumer_group, host_id, currency, confirmed_total, cancelled_total, bookings, cancellations)
      values (${group}, ${rows[0].host_id}, ${b.currency},
              ${cancelled ? 0 : b.total}, ${cancelled ? b.total : 0}, ${cancelled ? 0 : 1}, ${cancelled ? 1 : 0})
      on conflict (consumer_group, host_id, currency) do update
         set confirmed_total = host_earnings.confirmed_total + excluded.confirmed_total,
             cancelled_total = host_earnings.cancelled_total + excluded.cancelled_total,
             bookings = host_earnings.bookings + excluded.bookings,
             cancellations = host_earnings.cancellations + excluded.cancellations,
             updated_at = now()`);
    log.debug({ bookingId: b.bookingId, total: b.total, cancelled }, 'earnings applied');
  };

/** Empties a group's ledger (a full replay rebuilds it from the stream's first event). */
export async function clearLedger(tx: Tx, group: string): Promise<void> {
  await tx.execute(sql`delete from host_earnings where consumer_group = ${group}`);
}

export interface EarningsLine {
  currency: string;
  confirmed: number;
  cancelled: number;
  net: number;
  bookings: number;
  cancellations: number;
  updatedAt: string;
}

/** One host's ledger lines, by currency. */
export async function hostEarnings(db: Db, group: string, hostId: number): Promise<EarningsLine[]> {
  const { rows } = await db.execute<{
    currency: string;
    confirmed_total: string;
    cancelled_total: string;
    bookings: number;
    cancellations: number;
    updated_at: Date;
  }>(sql`
    select currency, confirmed_total, cancelled_total, bookings, cancellations, updated_at
      from host_earnings where consumer_group = ${group} and host_id = ${hostId} order by currency`);
  return rows.map((r) => ({
    currency: r.currency,
    confirmed: Number(r.confirmed_total),
    cancelled: Number(r.cancelled_total),
    net: Number(r.confirmed_total) - Number(r.cancelled_total),
    bookings: r.bookings,
    cancellations: r.cancellations,
    updatedAt: new Date(r.updated_at).toISOString(),
  }));
}

/**
 * The check the chaos run and the tests make: the ledger's net per host and currency against what
 * SQL computes from the bookings table (confirmed bookings' totals). Returns the lines that differ.
 */
export async function ledgerDifferences(db: Db, group: string) {
  const { rows } = await db.execute<{ host_id: string; currency: string; ledger: string | null; truth: string | null }>(sql`
    with truth as (
      select p.host_id, b.currency, sum(b.total) filter (where b.status = 'confirmed') as net
        from bookings b join properties p on p.id = b.property_id
       group by p.host_id, b.currency
    ), ledger as (
      select host_id, currency, confirmed_total - cancelled_total as net
        from host_earnings where consumer_group = ${group}
    )
    select coalesce(t.host_id, l.host_id) as host_id, coalesce(t.currency, l.currency) as currency,
           l.net as ledger, t.net as truth
      from truth t full join ledger l on l.host_id = t.host_id and l.currency = t.currency
     where coalesce(l.net, 0) <> coalesce(t.net, 0)`);
  return rows.map((r) => ({ hostId: Number(r.host_id), currency: r.currency, ledger: Number(r.ledger ?? 0), truth: Number(r.truth ?? 0) }));
}
