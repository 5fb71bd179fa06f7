import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import helmet from '@fastify/helmet';
import cors from '@fastify/cors';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { AppError } from '../errors.ts';
import type { Database } from '../db/client.ts';
import { createHealthDatabase } from '../db/health-database.ts';
import type { Logger } from '../logger.ts';
import { registerAuth } from './plugins/auth.ts';
import { registerErrorHandler } from './plugins/error-handler.ts';
import { registerLoadShedding } from './plugins/load-shedding.ts';
import { registerSlowClientGuards, slowClientTimeouts } from './slow-clients.ts';
import { problem, sendProblem } from './problem.ts';
import { adminRoutes } from './routes/admin.ts';
import { authRoutes } from './routes/auth.ts';
import { bookingRoutes } from './routes/bookings.ts';
import { healthRoutes } from './routes/health.ts';
import { registerMetrics } from './routes/metrics.ts';
import { rootRoutes } from './routes/root.ts';
import { propertyRoutes } from './routes/properties.ts';
import { searchRoutes } from './routes/search.ts';
import type { AppContext } from './context.ts';
import { earningsRoutes } from './routes/earnings.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { portalRoutes } from './routes/portal.ts';
import { VERSION } from '../version.ts';

// Callers that build the app (tests, scripts) get the context type from here too.
export type { AppContext } from './context.ts';

export interface BuildAppOptions extends AppContext {
  logger: Logger;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,100}$/;

/**
 * JSON bodies must be UTF-8 (RFC 8259). Fastify's own parser decodes leniently, so an invalid
 * byte silently became U+FFFD and was stored (found by the fuzz tests): the client's data changed
 * without anyone being told. Decode strictly first, then hand over to the default parser, which
 * keeps its __proto__/constructor poisoning checks and empty-body handling.
 */
function acceptOnlyValidUtf8Json(app: FastifyInstance) {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const decoder = new TextDecoder('utf-8', { fatal: true });
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = decoder.decode(body as Buffer);
    } catch {
      done(new AppError('bad_request', 'The request body is not valid UTF-8'), undefined);
      return;
    }
    // The default JSON parser answers through `done`, not a promise: its return value is nothing to wait for.
    void parseJson(request, text, done);
  });
}

/**
 * /health, /metrics and the outbox sample query off the pool requests wait for (ADR 0041): the
 * caller's pool, or one made here on the main pool's URL (and closed with the app).
 */
function healthDatabaseOf(app: FastifyInstance, ctx: AppContext): Database {
  if (ctx.healthDb) return ctx.healthDb;
  const healthDb = createHealthDatabase(ctx.db.pool.options.connectionString ?? ctx.config.DATABASE_URL, {
    pooler: ctx.db.pooler,
    timeoutMs: ctx.config.HEALTH_DB_TIMEOUT_MS,
  });
  app.addHook('onClose', async () => healthDb.close());
  return healthDb;
}

/**
 * Builds the API without listening, so tests can `inject` requests into it. `src/commands/api.ts` is the
 * only place that binds a port.
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    /** Read over and over by the dashboard: a success is logged at debug, not info (buildApp). */
    polled?: boolean;
  }
}

export async function buildApp(opts: BuildAppOptions): Promise<FastifyInstance> {
  const { config, logger, ...ctx } = opts;
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    // Fastify's own two lines a request (incoming, completed) become one, below.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.BODY_LIMIT_BYTES,
    // A client that stalls is cut off (src/http/slow-clients.ts): Fastify's defaults wait forever.
    ...slowClientTimeouts(config),
    trustProxy: config.TRUST_PROXY,
    // A caller's X-Request-Id is kept (if sane) so a request can be followed across services.
    requestIdHeader: 'x-request-id',
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    // The router answers a malformed %-escape or an over-long path parameter itself, before any
    // route or error handler, in its own JSON shape (and a 414 for a long id). Found by the fuzz
    // tests: answer them as the problem documents every other client error is.
    frameworkErrors: (err, _request, reply) => {
      const code = err.code === 'FST_ERR_BAD_URL' || err.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'bad_request' : 'internal_error';
      // Fastify ignores this handler's return value; the reply (a thenable) is sent, not awaited.
      void sendProblem(reply, problem(code, code === 'bad_request' ? 'The URL is not valid' : undefined));
    },
  });
  // JSON only: a text/plain body would otherwise reach the validators as a string.
  app.removeContentTypeParser('text/plain');
  acceptOnlyValidUtf8Json(app);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  // One line per request, with its request id: what a person watching the API wants to see. The
  // path without its query string: a query may carry what logs must not (search terms, tokens).
  // What the dashboard polls (a route's `config: { polled: true }`) answers every few seconds while
  // it is open: its successes go at debug, so `npm start`'s terminal shows what people do.
  app.addHook('onResponse', async (request, reply) => {
    const path = request.url.split('?', 1)[0];
    const level = request.routeOptions.config.polled === true && reply.statusCode < 400 ? 'debug' : 'info';
    request.log[level](
      { method: request.method, path, statusCode: reply.statusCode, ms: Math.round(reply.elapsedTime) },
      `${request.method} ${path} ${reply.statusCode}`,
    );
  });

  registerErrorHandler(app, { pool: ctx.db.pool });
  await app.register(helmet);
  // CORS is closed unless CORS_ORIGINS names the browser origins allowed to call the API.
  await app.register(cors, { origin: config.CORS_ORIGINS.length ? config.CORS_ORIGINS : false });
  await app.register(rateLimit, {
    global: false,
    errorResponseBuilder: () => new AppError('rate_limited'),
  });
  await app.register(swagger, {
    openapi: {
      info: { title: 'StayHub API', version: VERSION, description: 'Bookings with a transactional outbox.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  registerAuth(app, { db: ctx.db.db, sessionTtlHours: config.SESSION_TTL_HOURS });
  const routeCtx = { config, ...ctx, healthDb: healthDatabaseOf(app, { config, ...ctx }) };
  const metrics = registerMetrics(app, routeCtx); // GET /metrics and the request-duration hook (before the routes it times)
  const load = registerLoadShedding(app, { ...routeCtx, registry: metrics.registry }); // 503 overloaded before any work, reads first
  registerSlowClientGuards(app, { config, registry: metrics.registry }); // 429 past the uploads one address may have open
  await app.register(rootRoutes); // GET /: the front door (HTML for browsers, JSON links otherwise)
  await app.register(healthRoutes, { ...routeCtx, load });
  await app.register(authRoutes, routeCtx);
  await app.register(propertyRoutes, routeCtx);
  await app.register(bookingRoutes, routeCtx);
  await app.register(searchRoutes, routeCtx);
  await app.register(adminRoutes, routeCtx);
  await app.register(earningsRoutes, routeCtx); // GET /hosts/me/earnings (events consumer's ledger)
  await app.register(webhookRoutes, routeCtx); // /webhooks/…: hosts' endpoints and deliveries
  await app.register(portalRoutes, routeCtx); // /portal and /webhooks/portal-links: the hosts' webhook portal
  return app;
}
