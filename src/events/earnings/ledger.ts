import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.ts';
import { withTransaction, type Tx } from '../../db/transaction.ts';
import { PermanentError } from '../../errors.ts';
import type { GroupHandler } from '../handle-event.ts';

/*
 * The hosts' earnings ledger: per consumer group, host and currency, the total of confirmed
 * bookings minus cancellations. Kept by increments, which are not idempotent on their own. Two
 * records make each booking count once:
 * - the inbox (handle-event.ts: the same transaction records the event as seen) skips a message the
 *   group already applied, by its message id;
 * - earnings_bookings lists the bookings whose creation (and cancellation) the ledger counts, so a
 *   booking counts once whichever message brings it: its event, a backfilled copy stored past the
 *   stream's duplicate window, or the rebuild from the bookings table (`rebuildLedger`), after
 *   which the stream's events it already reflects change nothing. A cancellation of a booking the
 *   ledger does not count yet (its creation was never published, or was lost) counts the creation
 *   first, read from the bookings table: never a cancellation without its booking, which would
 *   leave a negative line for the host.
 * A group's events take its ledger lock shared, a rebuild or a clear takes it alone: a rebuild
 * never interleaves with an event of its group, whichever process runs it.
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

/** The advisory lock class of a group's ledger; the group's name (hashed) is the other half of the key. */
const LEDGER_LOCK_CLASS = 727_002;

/**
 * booking.created adds the total to confirmed_total; booking.cancelled adds it to cancelled_total
 * (and to confirmed_total first when the booking was not counted yet). The host is the property's
 * (a property never changes hosts); the event carries the property, not the host's identity,
 * because the log leaves contact details out.
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
    const booking = await verifiedBooking(tx, group, event.topic, b);
    const counts =
      event.topic === 'booking.cancelled'
        ? await countCancellation(tx, group, booking.id)
        : { creation: await countCreation(tx, group, booking.id, 'event'), cancellation: false };
    if (!counts.creation && !counts.cancellation) {
      log.debug({ bookingId: b.bookingId }, 'earnings: the ledger already counts this; no effect');
      return;
    }
    if (event.topic === 'booking.cancelled' && counts.creation) {
      // Its creation never reached this group (made before the relay was enabled, or lost with
      // events that aged out): the booking is counted from its row, then cancelled.
      log.warn(
        { bookingId: b.bookingId, total: b.total },
        'earnings: cancellation of a booking the ledger did not count; its creation counted first',
      );
    }
    await addToLine(tx, group, booking.hostId, b.currency, b.total, counts);
    log.debug({ bookingId: b.bookingId, total: b.total, ...counts }, 'earnings applied');
  };

/**
 * The booking, once the event agrees with its row; a PermanentError naming the first disagreement
 * otherwise. A booking's total and currency are fixed when it is made (a cancellation changes only
 * its status), so a booking.created read after the cancellation still matches.
 *
 * The same statement takes the group's ledger lock, shared, for the rest of the transaction (one
 * round trip less per event). What it reads cannot change under a rebuild, which writes only the
 * ledger; the writes that follow come after the lock.
 */
async function verifiedBooking(
  tx: Tx,
  group: string,
  topic: 'booking.created' | 'booking.cancelled',
  b: z.infer<typeof bookingBody>,
): Promise<{ id: number; hostId: number }> {
  const { rows } = await tx.execute<{
    id: string;
    host_id: string;
    property_id: string;
    total: number;
    currency: string;
    status: string;
  }>(sql`
    select b.id, p.host_id, p.public_id as property_id, b.total, b.currency, b.status,
           pg_advisory_xact_lock_shared(${LEDGER_LOCK_CLASS}, hashtext(${group})) as ledger_locked
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
  return { id: Number(row.id), hostId: Number(row.host_id) };
}

/**
 * Records that the ledger counts the booking. False when it already did. ON CONFLICT rather than
 * a read first: a second process applying another event of the same booking at the same moment
 * waits on this row, then sees it.
 */
async function countCreation(tx: Tx, group: string, bookingId: number, from: 'event' | 'gap'): Promise<boolean> {
  const { rows } = await tx.execute(sql`
    insert into earnings_bookings (consumer_group, booking_id, counted_from)
    values (${group}, ${bookingId}, ${from})
    on conflict do nothing
    returning 1`);
  return rows.length === 1;
}

/** Records the cancellation, and the creation first if the ledger did not count the booking. */
async function countCancellation(tx: Tx, group: string, bookingId: number): Promise<{ creation: boolean; cancellation: boolean }> {
  const creation = await countCreation(tx, group, bookingId, 'gap');
  const { rows } = await tx.execute(sql`
    update earnings_bookings set cancelled = true
     where consumer_group = ${group} and booking_id = ${bookingId} and not cancelled
    returning 1`);
  return { creation, cancellation: rows.length === 1 };
}

/** A booking event the group never applied, as the bookings table has it (audit.ts finds them). */
export interface MissedBookingEvent {
  topic: 'booking.created' | 'booking.cancelled';
  bookingId: number;
  hostId: number;
  total: number;
  currency: string;
}

/**
 * Counts a missed event from its booking's row, as the event would have been counted, under the
 * group's ledger lock (shared, as an event takes it). What the ledger already counts is left: the
 * event may have arrived since it was found missing, and when it arrives later it changes nothing.
 */
export async function countMissed(tx: Tx, group: string, m: MissedBookingEvent): Promise<{ creation: boolean; cancellation: boolean }> {
  await tx.execute(sql`select pg_advisory_xact_lock_shared(${LEDGER_LOCK_CLASS}, hashtext(${group}))`);
  const counts =
    m.topic === 'booking.cancelled'
      ? await countCancellation(tx, group, m.bookingId)
      : { creation: await countCreation(tx, group, m.bookingId, 'gap'), cancellation: false };
  if (counts.creation || counts.cancellation) await addToLine(tx, group, m.hostId, m.currency, m.total, counts);
  return counts;
}

async function addToLine(
  tx: Tx,
  group: string,
  hostId: number,
  currency: string,
  total: number,
  counts: { creation: boolean; cancellation: boolean },
): Promise<void> {
  const confirmed = counts.creation ? total : 0;
  const cancelled = counts.cancellation ? total : 0;
  await tx.execute(sql`
    insert into host_earnings (consumer_group, host_id, currency, confirmed_total, cancelled_total, bookings, cancellations)
    values (${group}, ${hostId}, ${currency}, ${confirmed}, ${cancelled}, ${counts.creation ? 1 : 0}, ${counts.cancellation ? 1 : 0})
    on conflict (consumer_group, host_id, currency) do update
       set confirmed_total = host_earnings.confirmed_total + excluded.confirmed_total,
           cancelled_total = host_earnings.cancelled_total + excluded.cancelled_total,
           bookings = host_earnings.bookings + excluded.bookings,
           cancellations = host_earnings.cancellations + excluded.cancellations,
           updated_at = now()`);
}

/** Takes a group's ledger for this transaction alone: its events wait until the COMMIT. */
async function lockLedger(tx: Tx, group: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(${LEDGER_LOCK_CLASS}, hashtext(${group}))`);
}

/** Empties a group's ledger and its list of counted bookings (a full replay refills them from the stream). */
export async function clearLedger(tx: Tx, group: string): Promise<void> {
  await lockLedger(tx, group);
  await tx.execute(sql`delete from host_earnings where consumer_group = ${group}`);
  await tx.execute(sql`delete from earnings_bookings where consumer_group = ${group}`);
}

/**
 * Whether the group has counted anything: a ledger that exists while the group's durable consumer
 * does not lost its position (its stream or its durable was deleted), and with it, perhaps, events
 * it had not read.
 */
export async function ledgerHasHistory(db: Db, group: string): Promise<boolean> {
  const { rows } = await db.execute<{ any: boolean }>(sql`
    select exists (select 1 from earnings_bookings where consumer_group = ${group})
        or exists (select 1 from processed_messages where consumer_group = ${group}) as any`);
  return rows[0]!.any;
}

export interface RebuildSummary {
  /** Bookings counted, cancelled ones included. */
  bookings: number;
  cancelled: number;
  /** host_earnings lines written (host × currency). */
  lines: number;
}

/**
 * Rebuilds a group's ledger from the bookings table, the source of truth (the ledger is derived
 * data, like the search index): in one transaction, every booking is counted, and each cancelled
 * one's cancellation, in earnings_bookings and in the sums. Whatever the stream still holds or
 * brings later then changes the ledger only for what this did not see: a booking made or
 * cancelled after this transaction's snapshot. Its inbox is left as it is: a message it lists was
 * applied before, so its effect is in the bookings table this reads.
 *
 * One statement per table: a million bookings take seconds, during which the group's events wait
 * on its ledger lock.
 */
export async function rebuildLedger(db: Db, group: string): Promise<RebuildSummary> {
  return withTransaction(db, async (tx) => {
    await clearLedger(tx, group);
    const counted = await tx.execute<{ bookings: number; cancelled: number }>(sql`
      with counted as (
        insert into earnings_bookings (consumer_group, booking_id, cancelled, counted_from)
        select ${group}, b.id, b.status = 'cancelled', 'rebuild' from bookings b
        returning cancelled)
      select count(*)::int as bookings, (count(*) filter (where cancelled))::int as cancelled from counted`);
    const lines = await tx.execute(sql`
      insert into host_earnings (consumer_group, host_id, currency, confirmed_total, cancelled_total, bookings, cancellations)
      select ${group}, p.host_id, b.currency, sum(b.total), coalesce(sum(b.total) filter (where e.cancelled), 0),
             count(*), count(*) filter (where e.cancelled)
        from earnings_bookings e join bookings b on b.id = e.booking_id join properties p on p.id = b.property_id
       where e.consumer_group = ${group}
       group by p.host_id, b.currency`);
    return { ...counted.rows[0]!, lines: lines.rowCount ?? 0 };
  });
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
export async function earningsLinesOfHost(db: Db, group: string, hostId: number): Promise<EarningsLine[]> {
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
