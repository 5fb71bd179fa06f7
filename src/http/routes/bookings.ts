import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
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
import type { AppContext } from '../context.ts';

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
        tags: ['bookings'],
        body: createBookingBody,
        response: { 200: bookingResponse, 201: bookingResponse },
      },
    },
    async (request, reply) => {
      const rawKey = request.headers['idempotency-key'];
      const parsedKey = idempotencyKeyHeader.optional().safeParse(rawKey);
      if (!parsedKey.success) {
        throw new AppError('validation_failed', undefined, [
          { path: 'headers.idempotency-key', message: parsedKey.error.issues[0]?.message ?? 'is invalid' },
        ]);
      }
      const result = await service.createBooking(deps, currentUser(request), request.body, parsedKey.data);
      if (result.replayed) reply.header('Idempotent-Replayed', 'true');
      if ('refused' in result) throw new AppError(result.refused);
      return reply.status(result.status as 201).send(result.body);
    },
  );

  app.get(
    '/bookings',
    {
      onRequest: app.authenticate,
      schema: { tags: ['bookings'], querystring: listBookingsQuery, response: { 200: bookingListResponse } },
    },
    async (request) => service.listBookings(deps, currentUser(request), request.query.limit, request.query.cursor),
  );

  app.get(
    '/bookings/:id',
    { onRequest: app.authenticate, schema: { tags: ['bookings'], params: idParams, response: { 200: bookingResponse } } },
    async (request) => service.getBooking(deps, currentUser(request), request.params.id),
  );

  app.post(
    '/bookings/:id/cancel',
    { onRequest: app.authenticate, schema: { tags: ['bookings'], params: idParams, response: { 200: bookingResponse } } },
    async (request) => service.cancelBooking(deps, currentUser(request), request.params.id),
  );
};
