import { z } from 'zod';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { earningsLinesOfHost } from '../../events/earnings/ledger.ts';
import { currentUser } from '../plugins/auth.ts';
import { bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext } from '../context.ts';

// Text, not a number: a sum of bookings is a bigint that can pass 2^53, where JSON parsers round.
const minorUnits = z
  .string()
  .regex(/^-?\d+$/)
  .describe('Minor units (cents), as a decimal string of digits: a sum can exceed what a JSON number holds exactly (2^53).');

const earningsResponse = z.object({
  /** The ledger is kept by a consumer of the events stream: it trails bookings by that consumer's lag. */
  group: z.string(),
  earnings: z.array(
    z.object({
      currency: z.string().length(3),
      confirmed: minorUnits,
      cancelled: minorUnits,
      /** confirmed − cancelled. */
      net: minorUnits,
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
        response: {
          200: earningsResponse.describe("The host's earnings, one line per currency"),
          ...problems('unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => {
      const group = ctx.config.EVENTS_EARNINGS_GROUP;
      return { group, earnings: await earningsLinesOfHost(ctx.db.db, group, currentUser(request).id) };
    },
  );
};
