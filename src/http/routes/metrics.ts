import type { FastifyInstance } from 'fastify';
import { HANDLER_CATALOGUE } from '../../messages/catalogue.ts';
import type { HandlerCatalogue } from '../../outbox/index.ts';
import { createApiMetrics, type ApiMetrics } from '../../metrics/api-metrics.ts';
import type { AppContext } from '../context.ts';
import type { Database } from '../../db/client.ts';

/**
 * GET /metrics in Prometheus' text format, and the hook that times every request.
 *
 * Called on the root instance before the routes are registered (not through `app.register`,
 * which would encapsulate the hook): an onResponse hook added here sees every route's requests.
 * The route label is the route's pattern, and requests that matched no route share one label,
 * so a scanner trying a thousand URLs cannot create a thousand series.
 *
 * /metrics is open like /health: it shows volumes and latencies, no personal data. Put it behind
 * the proxy's access rules when the API is public (see docs/operating.md).
 */
export function registerMetrics(
  app: FastifyInstance,
  ctx: AppContext & { healthDb: Database; handlerCatalogue?: HandlerCatalogue },
): ApiMetrics {
  const metrics = createApiMetrics({
    // Its own pool: on the main one a scrape under overload waited its turn for seconds (ADR 0041).
    db: ctx.healthDb.db,
    catalogue: ctx.handlerCatalogue ?? HANDLER_CATALOGUE,
    onOutboxReadError: (err) => app.log.warn({ err }, 'metrics: outbox stats could not be read'),
    ...(ctx.config.OUTBOX_WRITES === 'wal' ? { walSlot: ctx.config.OUTBOX_SLOT } : {}),
  });

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    metrics.observeRequest(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    if (request.method === 'POST' && route === '/bookings') metrics.observeBookingOutcome(reply.statusCode);
  });

  app.get('/metrics', { logLevel: 'warn', schema: { hide: true } }, async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  return metrics;
}
