import { and, desc, eq, sql, type SQL } from 'drizzle-orm';
import { alias } from 'drizzle-orm/pg-core';
import type { Db } from '../db/client.ts';
import type { Tx } from '../db/transaction.ts';
import { bookings, properties, users } from '../db/schema.ts';

export type BookingRow = typeof bookings.$inferSelect;

const guest = alias(users, 'guest');
const host = alias(users, 'host');

/** A booking with the people and property around it: what a response or an event needs. */
export interface BookingView {
  booking: BookingRow;
  property: { id: number; publicId: string; title: string; hostId: number };
  guest: { id: number; publicId: string; email: string; name: string };
  host: { id: number; publicId: string; email: string; name: string };
}

const viewColumns = {
  booking: bookings,
  property: { id: properties.id, publicId: properties.publicId, title: properties.title, hostId: properties.hostId },
  guest: { id: guest.id, publicId: guest.publicId, email: guest.email, name: guest.name },
  host: { id: host.id, publicId: host.publicId, email: host.email, name: host.name },
};

function selectViews(db: Db | Tx) {
  return db
    .select(viewColumns)
    .from(bookings)
    .innerJoin(properties, eq(properties.id, bookings.propertyId))
    .innerJoin(guest, eq(guest.id, bookings.guestId))
    .innerJoin(host, eq(host.id, properties.hostId));
}

/**
 * The property to book, its host, and the per-property booking lock, in one round trip.
 *
 * Concurrent inserts of overlapping stays under a GiST exclusion constraint can deadlock each
 * other (40P01) instead of one failing cleanly with 23P01. Taking a per-property transaction lock
 * first makes bookings of one property queue up, so the loser sees the winner's committed row and
 * gets a clean exclusion violation. Bookings of different properties do not wait on each other.
 * The constraint, not this lock, remains what guarantees no overlap. The lock is taken in the
 * select list (once, for the one matching row) to save a round trip on the hot path.
 */
export async function findPropertyLockedForBooking(tx: Tx, publicId: string, lockNamespace: number) {
  const [row] = await tx
    .select({
      property: properties,
      host: { id: host.id, publicId: host.publicId, email: host.email, name: host.name },
      locked: sql<string>`pg_advisory_xact_lock(${lockNamespace}, ${properties.id}::int)::text`,
    })
    .from(properties)
    .innerJoin(host, eq(host.id, properties.hostId))
    .where(eq(properties.publicId, publicId));
  return row && { property: row.property, host: row.host };
}

export async function insertBooking(tx: Tx, values: typeof bookings.$inferInsert): Promise<BookingRow> {
  const [row] = await tx.insert(bookings).values(values).returning();
  return row!;
}

export async function findBookingView(db: Db | Tx, publicId: string): Promise<BookingView | undefined> {
  const [row] = await selectViews(db).where(eq(bookings.publicId, publicId));
  return row;
}

/** Same, with the booking row locked until the transaction ends (cancel). */
export async function findBookingViewForUpdate(tx: Tx, publicId: string): Promise<BookingView | undefined> {
  const [row] = await selectViews(tx).where(eq(bookings.publicId, publicId)).for('update', { of: bookings });
  return row;
}

export async function markCancelled(tx: Tx, id: number): Promise<BookingRow> {
  const [row] = await tx
    .update(bookings)
    .set({ status: 'cancelled', cancelledAt: sql`now()`, updatedAt: sql`now()` })
    .where(eq(bookings.id, id))
    .returning();
  return row!;
}

/**
 * Keyset pagination, newest first, on the internal id (unique and increasing). The cursor is the
 * last booking's public id, resolved back to its id here, so internal ids never leave the database
 * and pages never repeat or skip a booking when new ones arrive.
 */
export async function listBookingViews(
  db: Db,
  scope: { guestId?: number; hostId?: number },
  limit: number,
  afterPublicId?: string,
): Promise<BookingView[]> {
  const conds: SQL[] = [];
  if (scope.guestId !== undefined) conds.push(eq(bookings.guestId, scope.guestId));
  if (scope.hostId !== undefined) conds.push(eq(properties.hostId, scope.hostId));
  if (afterPublicId) {
    conds.push(sql`${bookings.id} < (select b.id from bookings b where b.public_id = ${afterPublicId}::uuid)`);
  }
  return selectViews(db)
    .where(conds.length ? and(...conds) : undefined)
    .orderBy(desc(bookings.id))
    .limit(limit);
}
