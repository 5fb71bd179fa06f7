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
  bookingId: z.string().uuid(),
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
 *
 * The stream is not trusted: anyone who can publish on its subjects could credit any host with any
 * amount. So an event is applied only when the bookings table, which this consumer reads in the
 * same database, says the same thing: the booking exists, on that property (so of that property's
 * host), with that total and currency, and for a cancellation, the booking is cancelled. Any
 * mismatch is a PermanentError: the relay publishes an event only after the transaction that wrote
 * the booking committed, so no later delivery can find a different row, and the consumer
 * dead-letters the event at once (listed by `--dead`) instead of retrying it. This needs the
 * consumer to read the primary (DATABASE_URL), never a replica that could lag behind the relay.
 */
export const applyEarningsEvent =
  (group: string): GroupHandler =>
  async (tx, event, log) => {
    if (event.topic !== 'booking.created' && event.topic !== 'booking.cancelled') return; // not ours: seen, no effect
    const parsed = bookingBody.safeParse(event.body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new PermanentError(`earnings: ${event.topic} body does not match: ${issue?.path.join('.')} ${issue?.message}`);
    }
    const b = parsed.data;
    const cancelled = event.topic === 'booking.cancelled';
    const hostId = await verifiedHost(tx, event.topic, b);
    await tx.execute(sql`
      insert into host_earnings (consumer_group, host_id, currency, confirmed_total, cancelled_total, bookings, cancellations)
      values (${group}, ${hostId}, ${b.currency},
              ${cancelled ? 0 : b.total}, ${cancelled ? b.total : 0}, ${cancelled ? 0 : 1}, ${cancelled ? 1 : 0})
      on conflict (consumer_group, host_id, currency) do update
         set confirmed_total = host_earnings.confirmed_total + excluded.confirmed_total,
             cancelled_total = host_earnings.cancelled_total + excluded.cancelled_total,
             bookings = host_earnings.bookings + excluded.bookings,
             cancellations = host_earnings.cancellations + excluded.cancellations,
             updated_at = now()`);
    log.debug({ bookingId: b.bookingId, total: b.total, cancelled }, 'earnings applied');
  };

/**
 * The host to credit, once the event agrees with its booking's row; a PermanentError naming the
 * first disagreement otherwise. A booking's total and currency are fixed when it is made (a
 * cancellation changes only its status), so a booking.created read after the cancellation still
 * matches.
 */
async function verifiedHost(tx: Tx, topic: 'booking.created' | 'booking.cancelled', b: z.infer<typeof bookingBody>): Promise<number> {
  const { rows } = await tx.execute<{ host_id: string; property_id: string; total: number; currency: string; status: string }>(sql`
    select p.host_id, p.public_id as property_id, b.total, b.currency, b.status
      from bookings b join properties p on p.id = b.property_id
     where b.public_id = ${b.bookingId}`);
  const row = rows[0];
  const refuse = (why: string) => new PermanentError(`earnings: ${topic} for booking ${b.bookingId} refused: ${why}`);
  if (!row) throw refuse('no such booking');
  if (row.property_id !== b.propertyId) throw refuse(`the booking is on property ${row.property_id}, the event says ${b.propertyId}`);
  if (row.total !== b.total || row.currency !== b.currency) {
    throw refuse(`the booking's total is ${row.total} ${row.currency}, the event says ${b.total} ${b.currency}`);
  }
  if (topic === 'booking.cancelled' && row.status !== 'cancelled') throw refuse(`the booking is ${row.status}, not cancelled`);
  return Number(row.host_id);
}

/** Empties a group's ledger (a full replay rebuilds it from the stream's first event). */
export async function clearLedger(tx: Tx, group: string): Promise<void> {
  await tx.execute(sql`delete from host_earnings where consumer_group = ${group}`);
}

/**
 * Amounts in minor units as decimal strings: a sum of bookings is a bigint in PostgreSQL and can
 * pass 2^53, past which a JSON number (and Number()) silently rounds. Read as text, never through
 * Number(), so a large ledger is shown exactly instead of wrongly, or not at all.
 */
export interface EarningsLine {
  currency: string;
  confirmed: string;
  cancelled: string;
  net: string;
  bookings: number;
  cancellations: number;
  updatedAt: string;
}

/** One host's ledger lines, by currency. */
export async function hostEarnings(db: Db, group: string, hostId: number): Promise<EarningsLine[]> {
  const { rows } = await db.execute<{
    currency: string;
    confirmed: string;
    cancelled: string;
    net: string;
    bookings: number;
    cancellations: number;
    updated_at: Date;
  }>(sql`
    select currency, confirmed_total::text as confirmed, cancelled_total::text as cancelled,
           -- numeric: the difference of two bigints can itself be out of bigint's range
           (confirmed_total::numeric - cancelled_total)::text as net,
           bookings, cancellations, updated_at
      from host_earnings where consumer_group = ${group} and host_id = ${hostId} order by currency`);
  return rows.map((r) => ({
    currency: r.currency,
    confirmed: r.confirmed,
    cancelled: r.cancelled,
    net: r.net,
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
