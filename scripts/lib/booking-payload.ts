import { randomUUID } from 'node:crypto';
import type { PayloadOf } from '../../src/messages/topics.ts';

/** A complete, valid booking.created payload; override what the test cares about. */
export function bookingPayload(overrides: Partial<PayloadOf<'booking.created'>> = {}): PayloadOf<'booking.created'> {
  const bookingId = overrides.bookingId ?? randomUUID();
  return {
    bookingId,
    propertyId: randomUUID(),
    propertyTitle: 'Cabin by the lake',
    guestEmail: 'guest@example.test',
    guestName: 'Gina Guest',
    hostEmail: 'host@example.test',
    hostName: 'Hal Host',
    checkIn: '2026-12-04',
    checkOut: '2026-12-07',
    guests: 2,
    nights: 3,
    total: 45_678,
    currency: 'EUR',
    idempotencyKey: `booking-created:${bookingId}`,
    ...overrides,
  };
}
