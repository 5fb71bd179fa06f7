import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import * as service from '../../bookings/booking.service.ts';
import {
  bookingListResponse,
  bookingResponse,
  createBookingBody,
  idempotencyKeyHeader,
  listBookingsQuery,
} from '../../bookings/bookings.schemas.ts';
import { idParams } from '../../properties/properties.schemas.ts';
import { AppError } from '../../errors.ts';
import { currentUser } from '../plugins/auth.ts';
import { BODY_PROBLEMS, bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext } from '../context.ts';

// Validated with the body (a bad key is a 400 naming `headers.idempotency-key`), and so documented in /docs.
const createBookingHeaders = z.object({
  'idempotency-key': idempotencyKeyHeader
    .optional()
    .describe(
      'Makes the request safe to retry. The same key (per user) with the same body answers as the first ' +
        'request did, with `Idempotent-Replayed: true`, and books nothing more; with another body it is ' +
        'refused (422 `idempotency_key_reused`); while the first request is still running, 409 ' +
        '`request_in_progress`. Keys are kept for IDEMPOTENCY_TTL_HOURS (24 by default). Printable ASCII, 1 to 255 characters.',
    ),
});

export const bookingRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps = {
    db: ctx.db.db,
    serviceFeePercent: ctx.config.SERVICE_FEE_PERCENT,
    idempotencyTtlHours: ctx.config.IDEMPOTENCY_TTL_HOURS,
    today: ctx.today,
  };

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
          200: bookingResponse,
          201: bookingResponse,
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

  app.get(
    '/bookings',
    {
      onRequest: app.authenticate,
      schema: {
        summary: "Bookings the signed-in user may see: a guest's own, a host's properties', all for an admin",
        tags: ['bookings'],
        security: bearerAuth,
        querystring: listBookingsQuery,
        response: { 200: bookingListResponse, ...problems('validation_failed', 'invalid_cursor', 'unauthorized') },
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
        response: { 200: bookingResponse, ...problems('validation_failed', 'unauthorized', 'not_found') },
      },
    },
    async (request) => service.getBooking(deps, currentUser(request), request.params.id),
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
        response: { 200: bookingResponse, ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'not_found') },
      },
    },
    async (request) => service.cancelBooking(deps, currentUser(request), request.params.id),
  );
};
