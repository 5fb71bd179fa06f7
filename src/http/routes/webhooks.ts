import type { FastifyReply } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { idParams } from '../../properties/properties.schemas.ts';
import {
  adminEndpointListResponse,
  createEndpointBody,
  deliveryDetailResponse,
  deliveryListResponse,
  deliveryResponse,
  endpointActivityResponse,
  endpointListResponse,
  endpointResponse,
  endpointWithSecretResponse,
  listDeliveriesQuery,
  listQuery,
  recoverBody,
  recoverResponse,
  testEventBody,
  updateEndpointBody,
} from '../../webhooks/webhooks.schemas.ts';
import * as service from '../../webhooks/webhooks.service.ts';
import { auditLinkUse, hostOrLink, type Need } from './portal-link-auth.ts';
import { currentUser } from '../plugins/auth.ts';
import { BODY_PROBLEMS, bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext, ZodApp } from '../context.ts';

/** The service's dependencies, and the hook that lets a host's session or portal link (with the access asked) through. */
type RouteDeps = service.WebhooksDeps & { hostOrLink: (need: Need, roles?: ('host' | 'admin')[]) => ReturnType<typeof hostOrLink> };

/**
 * Webhooks to hosts' systems: a host manages their own endpoints, an admin everyone's
 * (docs/webhooks.md); a portal link acts as its host, read-only or in full (src/http/routes/portal-link-auth.ts).
 */
export const webhookRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  app.addHook('onSend', auditLinkUse(ctx.db.db));
  const deps: RouteDeps = {
    hostOrLink: (need, roles) => hostOrLink(app, ctx.db.db, need, roles),
    db: ctx.db.db,
    allowPrivateNetworks: ctx.config.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
    secretOverlapHours: ctx.config.WEBHOOK_SECRET_OVERLAP_HOURS,
    extraPorts: ctx.config.WEBHOOK_EXTRA_PORTS,
    maxEndpointsPerHost: ctx.config.WEBHOOK_MAX_ENDPOINTS_PER_HOST,
    manualSendsPerMinute: ctx.config.WEBHOOK_MANUAL_SENDS_PER_MINUTE,
  };
  registerEndpointRoutes(app, deps);
  registerEndpointChanges(app, deps);
  registerDeliveryRoutes(app, deps);
  registerManualSends(app, deps);
  registerAdminOverview(app, deps);
  registerPortalReads(app, deps);
};

const common = { tags: ['webhooks'], security: bearerAuth };
const read = problems('validation_failed', 'unauthorized', 'forbidden', 'not_found');
const write = problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'forbidden', 'not_found');

/** A manual send over the host's budget: the 429 says when to come back. */
async function withinBudget<T>(reply: FastifyReply, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof service.ManualRateLimitedError) void reply.header('retry-after', String(err.retryAfterSeconds));
    throw err;
  }
}

/** Registering an endpoint, and reading them back. */
function registerEndpointRoutes(app: ZodApp, deps: RouteDeps) {
  app.post(
    '/webhooks/endpoints',
    {
      onRequest: deps.hostOrLink('full', ['host']),
      schema: {
        ...common,
        summary: "Register an endpoint for the host's booking events; the answer holds its signing secret",
        body: createEndpointBody,
        response: {
          201: endpointWithSecretResponse.describe('The endpoint, with its signing secret (shown now and on rotation only)'),
          ...write,
          ...problems('conflict'),
        },
      },
    },
    async (request, reply) => reply.status(201).send(await service.createEndpoint(deps, currentUser(request), request.body)),
  );

  app.get(
    '/webhooks/endpoints',
    {
      onRequest: deps.hostOrLink('read'),
      schema: {
        ...common,
        summary: "The host's endpoints (all of them for an admin), newest first, each with its health",
        querystring: listQuery,
        response: {
          200: endpointListResponse.describe('A page of endpoints, newest first, each with its health, and the cursor of the next page'),
          ...problems('validation_failed', 'invalid_cursor', 'unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => service.listEndpoints(deps, currentUser(request), request.query.limit, request.query.cursor),
  );

  app.get(
    '/webhooks/endpoints/:id',
    {
      onRequest: deps.hostOrLink('read'),
      schema: {
        ...common,
        summary: 'One endpoint and its health',
        params: idParams,
        response: { 200: endpointResponse.describe('The endpoint and its health'), ...read },
      },
    },
    async (request) => service.getEndpoint(deps, currentUser(request), request.params.id),
  );
}

/** Changing an endpoint, deleting it, rotating its secret. */
function registerEndpointChanges(app: ZodApp, deps: RouteDeps) {
  app.patch(
    '/webhooks/endpoints/:id',
    {
      onRequest: deps.hostOrLink('full'),
      schema: {
        ...common,
        summary: 'Change the URL, event types, description, or enable/disable the endpoint',
        params: idParams,
        body: updateEndpointBody,
        response: { 200: endpointResponse.describe('The endpoint, changed'), ...write },
      },
    },
    async (request) => service.updateEndpoint(deps, currentUser(request), request.params.id, request.body),
  );

  app.delete(
    '/webhooks/endpoints/:id',
    {
      onRequest: deps.hostOrLink('full'),
      schema: {
        ...common,
        summary: 'Delete the endpoint and its deliveries',
        params: idParams,
        response: { 204: z.null().describe('Deleted, with its deliveries'), ...read },
      },
    },
    async (request, reply) => {
      await service.deleteEndpoint(deps, currentUser(request), request.params.id);
      return reply.status(204).send(null);
    },
  );

  app.post(
    '/webhooks/endpoints/:id/rotate-secret',
    {
      onRequest: deps.hostOrLink('full'),
      schema: {
        ...common,
        summary: 'A new signing secret; the old one keeps signing beside it for WEBHOOK_SECRET_OVERLAP_HOURS',
        params: idParams,
        response: {
          200: endpointWithSecretResponse.describe('The endpoint, with its new signing secret'),
          ...read,
          ...problems('conflict'),
        },
      },
    },
    async (request) => service.rotateSecret(deps, currentUser(request), request.params.id),
  );
}

/** An endpoint's delivery history. */
function registerDeliveryRoutes(app: ZodApp, deps: RouteDeps) {
  app.get(
    '/webhooks/endpoints/:id/deliveries',
    {
      onRequest: deps.hostOrLink('read'),
      schema: {
        ...common,
        summary: "The endpoint's deliveries, newest first, each with every attempt",
        params: idParams,
        querystring: listDeliveriesQuery,
        response: {
          200: deliveryListResponse.describe('A page of deliveries, newest first, each with its attempts, and the cursor of the next page'),
          ...problems('validation_failed', 'invalid_cursor', 'unauthorized', 'forbidden', 'not_found'),
        },
      },
    },
    async (request) => service.listDeliveries(deps, currentUser(request), request.params.id, request.query),
  );
}

/** What a host sends by hand (a test event, a recover, one delivery again), within WEBHOOK_MANUAL_SENDS_PER_MINUTE. */
function registerManualSends(app: ZodApp, deps: RouteDeps) {
  app.post(
    '/webhooks/endpoints/:id/test',
    {
      onRequest: deps.hostOrLink('full'),
      schema: {
        ...common,
        summary: 'Send a webhook.test event to this endpoint now (WEBHOOK_MANUAL_SENDS_PER_MINUTE per host)',
        params: idParams,
        body: testEventBody,
        response: {
          202: deliveryResponse.describe('The test delivery, queued to be sent now'),
          ...problems('validation_failed', 'unauthorized', 'forbidden', 'not_found', 'conflict', 'rate_limited'),
        },
      },
    },
    async (request, reply) =>
      reply
        .status(202)
        .send(await withinBudget(reply, () => service.sendTest(deps, currentUser(request), request.params.id, request.body?.eventType))),
  );

  app.post(
    '/webhooks/endpoints/:id/recover',
    {
      onRequest: deps.hostOrLink('full'),
      schema: {
        ...common,
        summary: 'Send again every failed delivery since a time, and every event since then the endpoint never had',
        params: idParams,
        body: recoverBody,
        response: {
          202: recoverResponse.describe(
            'How many failed deliveries got a new round, and how many deliveries were made for events never sent',
          ),
          ...write,
          ...problems('rate_limited'),
        },
      },
    },
    async (request, reply) =>
      reply
        .status(202)
        .send(await withinBudget(reply, () => service.recover(deps, currentUser(request), request.params.id, request.body.since))),
  );

  app.post(
    '/webhooks/deliveries/:id/retry',
    {
      onRequest: deps.hostOrLink('full'),
      schema: {
        ...common,
        summary: 'Send one delivery again now (a new round of attempts; the history stays; WEBHOOK_MANUAL_SENDS_PER_MINUTE per host)',
        params: idParams,
        response: {
          202: deliveryResponse.describe('The delivery, queued for a new round of attempts now'),
          ...problems('validation_failed', 'unauthorized', 'forbidden', 'not_found', 'conflict', 'rate_limited'),
        },
      },
    },
    async (request, reply) =>
      reply.status(202).send(await withinBudget(reply, () => service.retryDelivery(deps, currentUser(request), request.params.id))),
  );
}

/** The dashboard's view of every host's endpoints (admins). */
function registerAdminOverview(app: ZodApp, deps: RouteDeps) {
  app.get(
    '/admin/webhooks',
    {
      onRequest: app.requireRole('admin'),
      config: { polled: true },
      schema: {
        ...common,
        tags: ['admin'],
        summary: "Every host's webhook endpoints, the troubled first, each with its health and last failures (the dashboard)",
        response: {
          200: adminEndpointListResponse.describe("Every host's endpoints, the troubled first, each with its health and last failures"),
          ...problems('unauthorized', 'forbidden'),
        },
      },
    },
    async () => service.endpointsForAdmin(deps),
  );
}

/** What the portal reads beside the endpoints and their deliveries: one delivery with its request, and each endpoint's recent activity. */
function registerPortalReads(app: ZodApp, deps: RouteDeps) {
  app.get(
    '/webhooks/deliveries/:id',
    {
      onRequest: deps.hostOrLink('read'),
      config: { polled: true },
      schema: {
        ...common,
        summary: 'One delivery: what its attempts sent (headers, the exact body) and every attempt kept with its answer',
        params: idParams,
        response: { 200: deliveryDetailResponse.describe('The delivery, its request and its attempts'), ...read },
      },
    },
    async (request) => service.getDelivery(deps, currentUser(request), request.params.id),
  );

  app.get(
    '/webhooks/endpoint-activity',
    {
      onRequest: deps.hostOrLink('read'),
      config: { polled: true },
      schema: {
        ...common,
        summary: "Each of the host's endpoints: attempts and successes over the last hour and day, in flight, and its last failure",
        response: {
          200: endpointActivityResponse.describe("Each endpoint's recent activity, newest endpoint first"),
          ...problems('unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => service.endpointActivity(deps, currentUser(request)),
  );
}
