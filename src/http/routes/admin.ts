import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import type { FastifyPluginAsyncZod, ZodTypeProvider } from 'fastify-type-provider-zod';
import { HANDLER_CATALOGUE } from '../../messages/catalogue.ts';
import type { HandlerCatalogue } from '../../outbox/index.ts';
import { eventGroupsResponse } from '../../admin/event-groups.schemas.ts';
import { eventGroups } from '../../admin/event-groups.service.ts';
import * as service from '../../admin/outbox-admin.service.ts';
import type { Db } from '../../db/client.ts';
import {
  bulkRetryBody,
  depthQuery,
  depthResponse,
  listMessagesQuery,
  messageDetailResponse,
  messageListResponse,
  messageParams,
  retryResponse,
  statsResponse,
} from '../../admin/outbox-admin.schemas.ts';
import { createEventsMonitor, type EventsMonitor } from '../../events/monitor.ts';
import { currentUser } from '../plugins/auth.ts';
import { BODY_PROBLEMS, problems } from '../plugins/openapi.ts';
import type { AppContext, ZodApp } from '../context.ts';

export interface AdminRoutesOptions extends AppContext {
  /** Which topics the worker handles, and with which handlers. Defaults to the worker's handler list (src/messages/subscriptions.ts). */
  handlerCatalogue?: HandlerCatalogue;
}

/**
 * The operator's view: the outbox admin API, the events stream's consumer groups (admins only)
 * and the dashboard's static files.
 *
 * Every /admin/outbox and /admin/events route sits in one encapsulated scope whose onRequest hook
 * is `requireRole('admin')`, so a route added here later cannot forget it: 401 without a token,
 * 403 for anyone but an admin, before the query or body is even parsed.
 */
export const adminRoutes: FastifyPluginAsyncZod<AdminRoutesOptions> = async (app, opts) => {
  const deps: service.OutboxAdminDeps = {
    db: opts.db.db,
    catalogue: opts.handlerCatalogue ?? HANDLER_CATALOGUE,
  };
  const events = eventsMonitor(app, opts);

  await app.register(dashboardFiles);

  await app.register(async (scope) => {
    const api = scope.withTypeProvider<ZodTypeProvider>();
    api.addHook('onRequest', api.requireRole('admin'));
    registerOutboxReads(api, deps);
    registerEventGroupRoutes(api, deps.db, events);
    registerDeadLetterRoutes(api, deps);
  });
};

/**
 * With NATS_URL, the API's own view of the events stream: connects on the first request, keeps
 * the connection, closes it with the app.
 */
function eventsMonitor(app: FastifyInstance, opts: AdminRoutesOptions): EventsMonitor | undefined {
  if (!opts.config.NATS_URL) return undefined;
  const monitor = createEventsMonitor({
    url: opts.config.NATS_URL,
    stream: opts.config.EVENTS_STREAM,
    timeoutMs: opts.config.EVENTS_ADMIN_TIMEOUT_MS,
  });
  app.addHook('onClose', () => monitor.close());
  return monitor;
}

const tags = ['admin'];
const security = [{ bearer: [] }];

/** The outbox as the dashboard polls it: counts, depth over time, messages, one message. */
function registerOutboxReads(app: ZodApp, deps: service.OutboxAdminDeps) {
  app.get(
    '/admin/outbox/stats',
    {
      config: { polled: true },
      schema: {
        summary: 'Outbox counts (pending, leased, dead, done in the last hour), in all and by topic',
        tags,
        security,
        response: { 200: statsResponse.describe("The outbox's counts, in all and per topic"), ...problems('unauthorized', 'forbidden') },
      },
    },
    async () => service.stats(deps),
  );

  app.get(
    '/admin/outbox/depth',
    {
      config: { polled: true },
      schema: {
        summary: 'Pending and dead messages over the last minutes, one point a minute',
        tags,
        security,
        querystring: depthQuery,
        response: {
          200: depthResponse.describe('One point a minute: pending and dead messages'),
          ...problems('validation_failed', 'unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => service.depth(deps, request.query.minutes),
  );

  app.get(
    '/admin/outbox/messages',
    {
      config: { polled: true },
      schema: {
        summary: 'Outbox messages, newest first, filtered by status and topic',
        tags,
        security,
        querystring: listMessagesQuery,
        response: {
          200: messageListResponse.describe('A page of messages, newest first, and the cursor of the next page'),
          ...problems('validation_failed', 'unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => service.listMessagesPage(deps, request.query),
  );

  app.get(
    '/admin/outbox/messages/:publicId',
    {
      schema: {
        summary: "One outbox message: its payload, its history and each handler's state",
        tags,
        security,
        params: messageParams,
        response: {
          200: messageDetailResponse.describe("The message, its payload, its audit history and each handler's state"),
          ...problems('validation_failed', 'unauthorized', 'forbidden', 'not_found'),
        },
      },
    },
    async (request) => service.getMessage(deps, request.params.publicId),
  );
}

/** The events stream's consumer groups, as the API's own view of the stream (`events`) sees them. */
function registerEventGroupRoutes(app: ZodApp, db: Db, events: EventsMonitor | undefined) {
  app.get(
    '/admin/events/groups',
    {
      config: { polled: true },
      schema: {
        summary: "The events stream's consumer groups: what each has still to read, and its dead letters",
        tags,
        security,
        response: {
          200: eventGroupsResponse.describe('The stream and each consumer group: what it has still to read, its dead letters'),
          ...problems('unauthorized', 'forbidden', 'service_unavailable'),
        },
      },
    },
    async () => eventGroups({ db, events }),
  );
}

/** Replaying dead messages: one, or many by topic or ids; each replay logged with the admin who asked. */
function registerDeadLetterRoutes(app: ZodApp, deps: service.OutboxAdminDeps) {
  app.post(
    '/admin/outbox/messages/:publicId/retry',
    {
      schema: {
        summary: 'Replay one dead message',
        tags,
        security,
        params: messageParams,
        response: {
          200: retryResponse.describe('How many messages went back to PENDING, and their ids'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'forbidden', 'not_found', 'conflict'),
        },
      },
    },
    async (request) => {
      const result = await service.retryOne(deps, currentUser(request), request.params.publicId);
      request.log.info({ messageIds: result.messageIds, adminId: currentUser(request).publicId }, 'dead letter replayed');
      return result;
    },
  );

  app.post(
    '/admin/outbox/retry',
    {
      schema: {
        summary: 'Replay dead messages: all of one topic, or those listed by id',
        tags,
        security,
        body: bulkRetryBody,
        response: {
          200: retryResponse.describe('How many messages went back to PENDING, and their ids'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => {
      const result = await service.retryMany(deps, currentUser(request), request.body);
      request.log.info(
        {
          affected: result.affected,
          topic: 'topic' in request.body ? request.body.topic : undefined,
          adminId: currentUser(request).publicId,
        },
        'dead letters replayed',
      );
      return result;
    },
  );
}

/**
 * The dashboard: three static files, read once at start-up and served from memory. A fixed list,
 * not a directory handler, so no request path can reach any other file. Scripts and styles are
 * separate files because helmet's Content-Security-Policy forbids inline ones. The page itself
 * is public (it holds no data); everything it shows comes from the admin API with a token.
 */
async function dashboardFiles(app: FastifyInstance) {
  const dir = new URL('../../../public/admin/', import.meta.url);
  const files = [
    { urls: ['/admin', '/admin/'], file: 'index.html', type: 'text/html; charset=utf-8' },
    { urls: ['/admin/dashboard.js'], file: 'dashboard.js', type: 'text/javascript; charset=utf-8' },
    { urls: ['/admin/dashboard.css'], file: 'dashboard.css', type: 'text/css; charset=utf-8' },
  ];
  for (const { urls, file, type } of files) {
    const body = readFileSync(new URL(file, dir));
    for (const url of urls) {
      app.get(url, { schema: { hide: true } }, async (_request, reply) =>
        // no-cache: the browser revalidates, so a deploy's new dashboard is picked up at once.
        reply.type(type).header('cache-control', 'no-cache').send(body),
      );
    }
  }
}
