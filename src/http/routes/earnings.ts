import { z } from 'zod';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { hostEarnings } from '../../events/earnings/ledger.ts';
import { currentUser } from '../plugins/auth.ts';
import { bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext } from '../context.ts';

const earningsResponse = z.object({
  /** The ledger is kept by a consumer of the events stream: it trails bookings by that consumer's lag. */
  group: z.string(),
  earnings: z.array(
    z.object({
      currency: z.string().length(3),
      /** Minor units. */
      confirmed: z.number().int(),
      cancelled: z.number().int(),
      net: z.number().int(),
      bookings: z.number().int(),
      cancellations: z.number().int(),
      updatedAt: z.string(),
    }),
  ),
});

/** GET /hosts/me/earnings: the signed-in host's ledger lines (src/events/earnings/), one per currency. */
export const earningsRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  app.get(
    '/hosts/me/earnings',
    {
      onRequest: app.requireRole('host'),
      schema: {
        summary: "The signed-in host's earnings, one line per currency",
        tags: ['hosts'],
        security: bearerAuth,
        response: { 200: earningsResponse, ...problems('unauthorized', 'forbidden') },
      },
    },
    async (request) => {
      const group = ctx.config.EVENTS_EARNINGS_GROUP;
      return { group, earnings: await hostEarnings(ctx.db.db, group, currentUser(request).id) };
    },
  );
};
