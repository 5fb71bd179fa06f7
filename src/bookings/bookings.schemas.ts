import { z } from 'zod';

const isoDate = z.iso.date();

export const createBookingBody = z
  .strictObject({
    propertyId: z.string().uuid(),
    checkIn: isoDate,
    checkOut: isoDate,
    guests: z.number().int().min(1).max(100),
  })
  .refine((b) => b.checkOut > b.checkIn, { message: 'must be after checkIn', path: ['checkOut'] });
export type CreateBookingBody = z.infer<typeof createBookingBody>;

/** Stripe-style: printable ASCII, bounded. */
export const idempotencyKeyHeader = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces');

// Validated with the body (a bad key is a 400 naming `headers.idempotency-key`), and so documented in /docs.
export const createBookingHeaders = z.object({
  'idempotency-key': idempotencyKeyHeader
    .optional()
    .describe(
      'Makes the request safe to retry. The same key (per user) with the same body answers as the first ' +
        'request did, with `Idempotent-Replayed: true`, and books nothing more; with another body it is ' +
        'refused (422 `idempotency_key_reused`); while the first request is still running, 409 ' +
        '`request_in_progress`. Keys are kept for IDEMPOTENCY_TTL_HOURS (24 by default). Printable ASCII, 1 to 255 characters.',
    ),
});

export const priceResponse = z.object({
  currency: z.string(),
  nights: z.number().int(),
  nightlyPrice: z.number().int(),
  subtotal: z.number().int(),
  cleaningFee: z.number().int(),
  serviceFee: z.number().int(),
  total: z.number().int(),
});

export const bookingResponse = z.object({
  id: z.string().uuid(),
  propertyId: z.string().uuid(),
  guestId: z.string().uuid(),
  checkIn: z.string(),
  checkOut: z.string(),
  guests: z.number().int(),
  status: z.enum(['confirmed', 'cancelled']),
  price: priceResponse,
  createdAt: z.string(),
  cancelledAt: z.string().nullable(),
});
export type BookingResponse = z.infer<typeof bookingResponse>;

export const listBookingsQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  cursor: z.string().max(200).optional(),
});

export const bookingListResponse = z.object({
  items: z.array(bookingResponse),
  nextCursor: z.string().nullable(),
});
