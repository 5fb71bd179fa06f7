import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import * as service from '../../bookings/booking.service.ts';
import {
  bookingListResponse,
  bookingResponse,
  createBookingBody,
  createBookingHeaders,
  listBookingsQuery,
} from '../../bookings/bookings.schemas.ts';
import { idParams } from '../../properties/properties.schemas.ts';
import { AppError } from '../../errors.ts';
import { currentUser } from '../plugins/auth.ts';
import { BODY_PROBLEMS, bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext, ZodApp } from '../context.ts';

export const bookingRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps: service.BookingDeps = {
    db: ctx.db.db,
    serviceFeePercent: ctx.config.SERVICE_FEE_PERCENT,
    idempotencyTtlHours: ctx.config.IDEMPOTENCY_TTL_HOURS,
    today: ctx.today,
  };
  registerBookingChanges(app, deps);
  registerBookingReads(app, deps);
};

/** Booking (with its Idempotency-Key) and cancelling. */
function registerBookingChanges(app: ZodApp, deps: service.BookingDeps) {
  app.post(
    '/bookings',
    {
      onRequest: app.requireRole('guest'),
      schema: {
        summary: 'Book a stay (guests): the booking, and its confirmation emails through the outbox',
        tags: ['bookings'],
        security: bearerAuth,
        headers: createBookingHeaders,
        body: createBookingBody,
        response: {
          201: bookingResponse.describe(
            'The booking, confirmed, with its price; the same answer again for a repeated Idempotency-Key (Idempotent-Replayed: true)',
          ),
          ...problems(
            'validation_failed',
            ...BODY_PROBLEMS,
            'unauthorized',
            'forbidden',
            'not_found',
            'dates_unavailable',
            'request_in_progress',
            'check_in_in_past',
            'too_many_guests',
            'stay_too_long',
            'property_inactive',
            'idempotency_key_reused',
            'overloaded',
          ),
        },
      },
    },
    async (request, reply) => {
      const key = request.headers['idempotency-key'];
      const result = await service.createBooking(deps, currentUser(request), request.body, key);
      if (result.replayed) reply.header('Idempotent-Replayed', 'true');
      if ('refused' in result) throw new AppError(result.refused);
      return reply.status(result.status as 201).send(result.body);
    },
  );

  app.post(
    '/bookings/:id/cancel',
    {
      onRequest: app.authenticate,
      schema: {
        summary: 'Cancel a booking (its guest or its host); cancelling again changes nothing',
        tags: ['bookings'],
        security: bearerAuth,
        params: idParams,
        response: {
          200: bookingResponse.describe('The booking, cancelled (also when it already was)'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'not_found'),
        },
      },
    },
    async (request) => service.cancelBooking(deps, currentUser(request), request.params.id),
  );
}

/** What a user may see of bookings: a page of them, or one. */
function registerBookingReads(app: ZodApp, deps: service.BookingDeps) {
  app.get(
    '/bookings',
    {
      onRequest: app.authenticate,
      schema: {
        summary: "Bookings the signed-in user may see: a guest's own, a host's properties', all for an admin",
        tags: ['bookings'],
        security: bearerAuth,
        querystring: listBookingsQuery,
        response: {
          200: bookingListResponse.describe('A page of bookings, newest first, and the cursor of the next page'),
          ...problems('validation_failed', 'invalid_cursor', 'unauthorized'),
        },
      },
    },
    async (request) => service.listBookings(deps, currentUser(request), request.query.limit, request.query.cursor),
  );

  app.get(
    '/bookings/:id',
    {
      onRequest: app.authenticate,
      schema: {
        summary: 'One booking, to its guest, its host or an admin',
        tags: ['bookings'],
        security: bearerAuth,
        params: idParams,
        response: { 200: bookingResponse.describe('The booking'), ...problems('validation_failed', 'unauthorized', 'not_found') },
      },
    },
    async (request) => service.getBooking(deps, currentUser(request), request.params.id),
  );
}
