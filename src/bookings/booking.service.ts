import type { Db } from '../db/client.ts';
import { withTransaction } from '../db/transaction.ts';
import { uuidV7 } from '../db/uuid-v7.ts';
import { AppError } from '../errors.ts';
import { enqueueTopic, insertWithTopicEvent } from '../messages/enqueue.ts';
import type { UserRow } from '../users/users.repository.ts';
import * as repo from './bookings.repository.ts';
import type { BookingResponse, CreateBookingBody } from './bookings.schemas.ts';
import { claimIdempotencyKey, requestHash, storeIdempotentResponse } from './idempotency.ts';
import { priceStay } from './pricing.ts';
import { decodeCursor, encodeCursor } from '../pagination.ts';

export const MAX_NIGHTS = 90;

/** Namespace of the per-property booking lock, folded into its one bigint key (see the repository). */
export const BOOKING_LOCK_NAMESPACE = 0x5b00c;

export interface BookingDeps {
  db: Db;
  serviceFeePercent: number;
  idempotencyTtlHours: number;
  /** Today's date, 'YYYY-MM-DD' (UTC). Injected so tests can pin the calendar. */
  today?: () => string;
}

const utcToday = () => new Date().toISOString().slice(0, 10);

export function toBookingResponse(v: repo.BookingView): BookingResponse {
  const b = v.booking;
  return {
    id: b.publicId,
    propertyId: v.property.publicId,
    guestId: v.guest.publicId,
    checkIn: b.checkIn,
    checkOut: b.checkOut,
    guests: b.guests,
    status: b.status,
    price: {
      currency: b.currency,
      nights: b.nights,
      nightlyPrice: b.nightlyPrice,
      subtotal: b.subtotal,
      cleaningFee: b.cleaningFee,
      serviceFee: b.serviceFee,
      total: b.total,
    },
    createdAt: b.createdAt.toISOString(),
    cancelledAt: b.cancelledAt ? b.cancelledAt.toISOString() : null,
  };
}

type EventBooking = Pick<repo.BookingRow, 'publicId' | 'checkIn' | 'checkOut' | 'guests' | 'nights' | 'total' | 'currency'>;

function bookingEventPayload(v: Omit<repo.BookingView, 'booking'> & { booking: EventBooking }, idempotencyKey: string) {
  const b = v.booking;
  return {
    bookingId: b.publicId,
    propertyId: v.property.publicId,
    propertyTitle: v.property.title,
    guestEmail: v.guest.email,
    guestName: v.guest.name,
    hostEmail: v.host.email,
    hostName: v.host.name,
    checkIn: b.checkIn,
    checkOut: b.checkOut,
    guests: b.guests,
    nights: b.nights,
    total: b.total,
    currency: b.currency,
    idempotencyKey,
  };
}

export type CreateBookingResult =
  | { status: number; body: BookingResponse; replayed: boolean }
  /** The dates are taken: answered as this error (recorded under the Idempotency-Key, if any). */
  | { refused: 'dates_unavailable'; replayed: boolean };

/** What an Idempotency-Key answers after a refusal (its stored body). */
const REFUSED = { status: 409, body: { code: 'dates_unavailable' as const } };

/**
 * Books a stay. One transaction holds: the idempotency key, the booking row and its
 * `booking.created` outbox row. The exclusion constraint decides whether the dates are free; if
 * it refuses, neither the booking nor its outbox row is written, and nobody is emailed about a
 * booking that lost the race.
 */
export async function createBooking(
  deps: BookingDeps,
  guest: UserRow,
  body: CreateBookingBody,
  idempotencyKey?: string,
): Promise<CreateBookingResult> {
  if (guest.role !== 'guest') throw new AppError('forbidden', 'Only guests can book');
  const today = (deps.today ?? utcToday)();

  return withTransaction(deps.db, async (tx) => {
    if (idempotencyKey) {
      const claim = await claimIdempotencyKey(tx, guest.id, idempotencyKey, requestHash(body), deps.idempotencyTtlHours);
      if (claim.kind === 'replay') {
        if (claim.response.status === REFUSED.status) return { refused: REFUSED.body.code, replayed: true };
        return { status: claim.response.status, body: claim.response.body as BookingResponse, replayed: true };
      }
    }

    const found = await repo.findPropertyLockedForBooking(tx, body.propertyId, BOOKING_LOCK_NAMESPACE);
    if (!found) throw new AppError('not_found', 'No such property');
    const { property, host } = found;
    if (!property.active) throw new AppError('property_inactive');
    if (body.checkIn < today) throw new AppError('check_in_in_past');
    if (body.guests > property.maxGuests) {
      throw new AppError('too_many_guests', `This property takes at most ${property.maxGuests} guests`);
    }
    const price = priceStay({ ...body, ...property }, deps.serviceFeePercent);
    if (price.nights > MAX_NIGHTS) throw new AppError('stay_too_long');

    // The public id is chosen here so the event's payload can be built before the insert, and the
    // booking and its event written by one statement. Time-ordered (a UUIDv7): it is also the key
    // of the booking's outbox messages, and its index entries then land at the index's right edge.
    const values: repo.NewBooking = {
      publicId: uuidV7(),
      propertyId: property.id,
      guestId: guest.id,
      checkIn: body.checkIn,
      checkOut: body.checkOut,
      guests: body.guests,
      ...price,
    };
    const people = {
      property: { id: property.id, publicId: property.publicId, title: property.title, hostId: property.hostId },
      guest: { id: guest.id, publicId: guest.publicId, email: guest.email, name: guest.name },
      host,
    };
    // The booking and its event: the event is written by the booking's own INSERT statement (one
    // round trip), and exists exactly when the booking does; COMMIT is withTransaction's, below.
    const event = bookingEventPayload({ booking: values, ...people }, `booking-created:${values.publicId}`);
    // Grouped by host, owned by the guest who books: one host's flood of work takes turns with the
    // others' (ADR 0033), and so does one guest's, however many hosts it books (ADR 0039).
    const inserted = await insertWithTopicEvent(tx, repo.bookingInsert(values), 'booking.created', event, {
      key: values.publicId,
      group: host.publicId,
      owner: guest.publicId,
    });
    const booking = inserted && repo.toBookingRow(inserted);
    if (!booking) {
      // The dates are taken. With a key, the refusal is the key's answer from now on, committed
      // with it: a duplicate sent at the same moment (waiting on the key) replays this 409. Thrown
      // instead, the rollback would free the key, and the duplicate could book dates that a
      // cancellation freed in the meantime: two different answers to one request.
      if (idempotencyKey) await storeIdempotentResponse(tx, guest.id, idempotencyKey, REFUSED);
      return { refused: REFUSED.body.code, replayed: false };
    }

    const response = toBookingResponse({ booking, ...people });
    if (idempotencyKey) await storeIdempotentResponse(tx, guest.id, idempotencyKey, { status: 201, body: response });
    return { status: 201, body: response, replayed: false };
  });
}

/** The guest sees their bookings; the host sees bookings of their properties; nobody else learns it exists. */
function canSee(user: UserRow, v: repo.BookingView): boolean {
  return user.role === 'admin' || v.guest.id === user.id || v.property.hostId === user.id;
}

export async function getBooking(deps: BookingDeps, user: UserRow, publicId: string): Promise<BookingResponse> {
  const v = await repo.findBookingView(deps.db, publicId);
  if (!v || !canSee(user, v)) throw new AppError('not_found', 'No such booking');
  return toBookingResponse(v);
}

/**
 * Cancels a confirmed booking and writes `booking.cancelled` in the same transaction. Cancelling
 * an already-cancelled booking answers the booking as it is and writes nothing: the second click
 * of an impatient user must not send a second email.
 */
export async function cancelBooking(deps: BookingDeps, user: UserRow, publicId: string): Promise<BookingResponse> {
  return withTransaction(deps.db, async (tx) => {
    const v = await repo.findBookingViewForUpdate(tx, publicId);
    if (!v || !(v.guest.id === user.id || v.property.hostId === user.id)) {
      throw new AppError('not_found', 'No such booking');
    }
    if (v.booking.status === 'cancelled') return toBookingResponse(v);
    const booking = await repo.markCancelled(tx, v.booking.id);
    const updated = { ...v, booking };
    await enqueueTopic(
      tx,
      'booking.cancelled',
      {
        ...bookingEventPayload(updated, `booking-cancelled:${booking.publicId}`),
        cancelledBy: v.guest.id === user.id ? 'guest' : 'host',
      },
      // Owned by whoever cancels (the guest or the host): their cancellations take turns with others' (ADR 0039).
      { key: booking.publicId, group: v.host.publicId, owner: user.publicId },
    );
    return toBookingResponse(updated);
  });
}

export async function listBookings(deps: BookingDeps, user: UserRow, limit: number, cursor?: string) {
  const scope = user.role === 'host' ? { hostId: user.id } : user.role === 'guest' ? { guestId: user.id } : {};
  const rows = await repo.listBookingViews(deps.db, scope, limit + 1, cursor ? decodeCursor(cursor) : undefined);
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return {
    items: page.map(toBookingResponse),
    nextCursor: rows.length > limit && last ? encodeCursor(last.booking.publicId) : null,
  };
}
