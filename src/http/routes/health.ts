import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { outboxStats } from '../../outbox/index.ts';
import type { Database } from '../../db/client.ts';
import type { AppContext } from '../context.ts';
import type { LoadState } from '../plugins/load-shedding.ts';
import { DEFAULT_RETRY_AFTER_SECONDS } from '../problem.ts';

const healthResponse = z.object({
  status: z.enum(['ok', 'error']),
  db: z.enum(['up', 'down']),
  outbox: z
    .object({ pending: z.number(), leased: z.number(), dead: z.number(), oldestPendingAgeSeconds: z.number().nullable() })
    .optional(),
  /** What admission control refuses now; overloaded is still 200: the process is alive and answering. */
  load: z.object({ refusing: z.enum(['nothing', 'reads', 'everything']), eventLoopDelayMs: z.number(), poolWaitMs: z.number() }).optional(),
});

export interface HealthOptions extends AppContext {
  /** Its own small pool, so that the answer does not wait behind the requests (ADR 0041). */
  healthDb: Database;
  load: () => LoadState;
}

/**
 * Liveness plus the outbox's three alarm numbers and the load; 503 when the database does not
 * answer within HEALTH_DB_TIMEOUT_MS on the health pool.
 */
export const healthRoutes: FastifyPluginAsyncZod<HealthOptions> = async (app, ctx) => {
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
        const s = await outboxStats(ctx.healthDb.db);
        return {
          status: 'ok' as const,
          db: 'up' as const,
          outbox: { pending: s.pending, leased: s.leased, dead: s.dead, oldestPendingAgeSeconds: s.oldestPendingAgeSeconds },
          load: ctx.load(),
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
          .send({ status: 'error' as const, db: 'down' as const, load: ctx.load() });
      }
    },
  );
};
