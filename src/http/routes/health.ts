import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { outboxStats } from '../../outbox/index.ts';
import type { AppContext } from '../context.ts';
import { DEFAULT_RETRY_AFTER_SECONDS } from '../problem.ts';

const healthResponse = z.object({
  status: z.enum(['ok', 'error']),
  db: z.enum(['up', 'down']),
  outbox: z
    .object({ pending: z.number(), leased: z.number(), dead: z.number(), oldestPendingAgeSeconds: z.number().nullable() })
    .optional(),
});

/** Liveness plus the outbox's three alarm numbers; 503 when the database cannot be reached. */
export const healthRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  app.get(
    '/health',
    {
      logLevel: 'warn',
      schema: {
        summary: 'Liveness: the database, and the outbox backlog (503 when the database is down)',
        tags: ['ops'],
        response: {
          200: healthResponse.describe('The database answers; the outbox backlog'),
          503: healthResponse.describe('The database does not answer'),
        },
      },
    },
    async (request, reply) => {
      try {
        const s = await outboxStats(ctx.db.db);
        return {
          status: 'ok' as const,
          db: 'up' as const,
          outbox: { pending: s.pending, leased: s.leased, dead: s.dead, oldestPendingAgeSeconds: s.oldestPendingAgeSeconds },
        };
      } catch (err) {
        // The root cause (ECONNREFUSED, timeout…) is what an operator needs; not the whole query.
        let cause: unknown = err;
        while ((cause as { cause?: unknown }).cause) cause = (cause as { cause?: unknown }).cause;
        request.log.warn({ reason: (cause as Error).message }, 'health check: database unreachable');
        // Like every 503 of the API, it says when to look again (src/http/problem.ts).
        return reply
          .status(503)
          .header('retry-after', String(DEFAULT_RETRY_AFTER_SECONDS))
          .send({ status: 'error' as const, db: 'down' as const });
      }
    },
  );
};
