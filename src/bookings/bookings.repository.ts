import { and, desc, eq, sql, type SQL } from 'drizzle-orm';
import { alias } from 'drizzle-orm/pg-core';
import type { Db } from '../db/client.ts';
import { clientOf, run, statement } from '../db/prepared.ts';
import type { Tx } from '../db/transaction.ts';
import { bookings, properties, users } from '../db/schema.ts';
import type { RowInsert } from '../outbox/index.ts';
import type { PropertyRow } from '../properties/properties.repository.ts';

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

/*
 * The booking transaction's statements are plain SQL, prepared once per connection (see
 * db/prepared.ts): POST /bookings is the hot path. The rest of this file keeps drizzle.
 */

/**
 * The per-property booking lock's key: one bigint that takes the property's whole id. The
 * namespace sits in the high bits and is folded in with XOR, which is a bijection on bigint: two
 * properties can never share a key, whatever their ids (the two-int form used to cast the bigint
 * id to int, which fails once ids pass 2^31). The key space is shared with every other user of
 * single-bigint advisory locks; a collision there would only make two unrelated transactions wait
 * for each other, never break a guarantee.
 */
export const BOOKING_LOCK_KEY_SQL = (namespace: number, idExpr: string) => `((${namespace}::bigint << 32) # ${idExpr})`;

const PROPERTY_LOCKED = (namespace: number) =>
  statement(
    `booking-property-locked-v2-${namespace}`,
    `select p.id, p.public_id, p.host_id, p.title, p.description, p.city, p.country, p.currency,
            p.nightly_price, p.cleaning_fee, p.max_guests, p.active, p.created_at, p.updated_at,
            h.public_id as host_public_id, h.email as host_email, h.name as host_name,
            pg_advisory_xact_lock(${BOOKING_LOCK_KEY_SQL(namespace, 'p.id')})::text as locked
       from properties p join users h on h.id = p.host_id
      where p.public_id = $1`,
  );
const propertyLockedStatements = new Map<number, ReturnType<typeof PROPERTY_LOCKED>>();

/** A row of PROPERTY_LOCKED as pg returns it: bigint ids as strings, the other columns as the row has them. */
type PropertyLockedColumns = {
  id: string | number;
  public_id: PropertyRow['publicId'];
  host_id: string | number;
  title: PropertyRow['title'];
  description: PropertyRow['description'];
  city: PropertyRow['city'];
  country: PropertyRow['country'];
  currency: PropertyRow['currency'];
  nightly_price: PropertyRow['nightlyPrice'];
  cleaning_fee: PropertyRow['cleaningFee'];
  max_guests: PropertyRow['maxGuests'];
  active: PropertyRow['active'];
  created_at: PropertyRow['createdAt'];
  updated_at: PropertyRow['updatedAt'];
  host_public_id: string;
  host_email: string;
  host_name: string;
};

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
  let stmt = propertyLockedStatements.get(lockNamespace);
  if (!stmt) propertyLockedStatements.set(lockNamespace, (stmt = PROPERTY_LOCKED(lockNamespace)));
  const [r] = await run<PropertyLockedColumns>(clientOf(tx), stmt, [publicId]);
  if (!r) return undefined;
  const property: PropertyRow = {
    id: Number(r.id),
    publicId: r.public_id,
    hostId: Number(r.host_id),
    title: r.title,
    description: r.description,
    city: r.city,
    country: r.country,
    currency: r.currency,
    nightlyPrice: r.nightly_price,
    cleaningFee: r.cleaning_fee,
    maxGuests: r.max_guests,
    active: r.active,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
  const host = { id: property.hostId, publicId: r.host_public_id, email: r.host_email, name: r.host_name };
  return { property, host };
}

export type NewBooking = Omit<
  typeof bookings.$inferInsert,
  'id' | 'publicId' | 'status' | 'createdAt' | 'updatedAt' | 'cancelledAt' | 'stay'
> & {
  publicId: string;
};

/** The booking row's columns, as the insert returns them (listed, never `*`: see db/prepared.ts). */
const BOOKING_COLUMNS = `id, public_id, property_id, guest_id, check_in, check_out, stay, guests, status, currency, nights,
  nightly_price, subtotal, cleaning_fee, service_fee, total, created_at, updated_at, cancelled_at`;

/**
 * The booking's INSERT, handed to the outbox (`insertWithEvent`, src/outbox/enqueue.ts), which
 * writes the `booking.created` event from its RETURNING in the same statement. If the exclusion
 * constraint refuses the stay (`on conflict do nothing`: an overlapping confirmed stay exists,
 * committed, or committed by the transaction it waited for), nothing is written and nothing
 * returned, without an error: the transaction stays usable, so the refusal can be recorded under
 * the request's Idempotency-Key (booking.service.ts). The only other unique constraint is the
 * booking's public id (a UUIDv7 made by src/db/uuid-v7.ts).
 */
export function bookingInsert(v: NewBooking): RowInsert {
  return {
    name: 'booking-insert-v3',
    text: `insert into bookings (public_id, property_id, guest_id, check_in, check_out, guests, currency, nights,
                                 nightly_price, subtotal, cleaning_fee, service_fee, total)
           values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
           on conflict do nothing
           returning ${BOOKING_COLUMNS}`,
    values: [
      v.publicId,
      v.propertyId,
      v.guestId,
      v.checkIn,
      v.checkOut,
      v.guests,
      v.currency,
      v.nights,
      v.nightlyPrice,
      v.subtotal,
      v.cleaningFee,
      v.serviceFee,
      v.total,
    ],
  };
}

/** A row of BOOKING_COLUMNS as pg returns it: bigint ids as strings, the other columns as the row has them. */
type BookingColumns = {
  id: string | number;
  public_id: BookingRow['publicId'];
  property_id: string | number;
  guest_id: string | number;
  check_in: BookingRow['checkIn'];
  check_out: BookingRow['checkOut'];
  stay: BookingRow['stay'];
  guests: BookingRow['guests'];
  status: BookingRow['status'];
  currency: BookingRow['currency'];
  nights: BookingRow['nights'];
  nightly_price: BookingRow['nightlyPrice'];
  subtotal: BookingRow['subtotal'];
  cleaning_fee: BookingRow['cleaningFee'];
  service_fee: BookingRow['serviceFee'];
  total: BookingRow['total'];
  created_at: BookingRow['createdAt'];
  updated_at: BookingRow['updatedAt'];
  cancelled_at: BookingRow['cancelledAt'];
};

/** A row of BOOKING_COLUMNS (an untyped RETURNING row) as the booking. */
export function toBookingRow(row: Record<string, unknown>): BookingRow {
  const r = row as BookingColumns;
  return {
    id: Number(r.id),
    publicId: r.public_id,
    propertyId: Number(r.property_id),
    guestId: Number(r.guest_id),
    checkIn: r.check_in,
    checkOut: r.check_out,
    stay: r.stay,
    guests: r.guests,
    status: r.status,
    currency: r.currency,
    nights: r.nights,
    nightlyPrice: r.nightly_price,
    subtotal: r.subtotal,
    cleaningFee: r.cleaning_fee,
    serviceFee: r.service_fee,
    total: r.total,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    cancelledAt: r.cancelled_at,
  };
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
