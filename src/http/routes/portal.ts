import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { idParams } from '../../properties/properties.schemas.ts';
import { WEBHOOK_EVENT_TYPES, TEST_EVENT_TYPE } from '../../webhooks/event-types.ts';
import { auditLinkUse, hostOrLink, linkOf } from './portal-link-auth.ts';
import {
  createPortalLinkBody,
  portalLinkListResponse,
  portalLinkUsesResponse,
  portalLinkWithUrlResponse,
  portalSessionResponse,
} from '../../webhooks/portal-links.schemas.ts';
import * as links from '../../webhooks/portal-links.service.ts';
import { currentUser } from '../plugins/auth.ts';
import { BODY_PROBLEMS, bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext, ZodApp } from '../context.ts';

/**
 * The webhook portal (docs/webhooks.md, "Portal"): its static files, and the portal links a host
 * hands on. Everything the portal shows it reads from the webhooks API (routes/webhooks.ts), with
 * the host's session or a link; these routes only make, list and revoke links, and say who is
 * looking.
 */
export const portalRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps: links.PortalLinkDeps = { db: ctx.db.db, maxMinutes: ctx.config.WEBHOOK_PORTAL_LINK_MAX_MINUTES };
  app.addHook('onSend', auditLinkUse(ctx.db.db));
  portalFiles(app);
  registerLinkRoutes(app, deps);

  app.get(
    '/webhooks/portal/session',
    {
      onRequest: hostOrLink(app, ctx.db.db, 'read', ['host']),
      schema: {
        ...common,
        summary: 'Who the portal is showing: the host, and whether through its session or a portal link (read-only or full)',
        response: {
          200: portalSessionResponse.describe('The host and the access the portal has'),
          ...problems('unauthorized', 'forbidden'),
        },
      },
    },
    async (request) => {
      const user = currentUser(request);
      const link = linkOf(request);
      return {
        host: { id: user.publicId, name: user.name },
        via: link ? ('link' as const) : ('session' as const),
        access: link?.access ?? ('full' as const),
        expiresAt: link ? link.expires_at.toISOString() : null,
        secretOverlapHours: ctx.config.WEBHOOK_SECRET_OVERLAP_HOURS,
        eventTypes: [TEST_EVENT_TYPE, ...WEBHOOK_EVENT_TYPES],
      };
    },
  );
};

const common = { tags: ['webhooks'], security: bearerAuth };

/** Links are made, read and revoked by the host's own session only: a link cannot make another. */
function registerLinkRoutes(app: ZodApp, deps: links.PortalLinkDeps) {
  app.post(
    '/webhooks/portal-links',
    {
      onRequest: app.requireRole('host'),
      schema: {
        ...common,
        summary:
          "A link to the webhook portal for the host's developer: no password, the host's endpoints only, read-only or full, for a short time",
        body: createPortalLinkBody,
        response: {
          201: portalLinkWithUrlResponse.describe('The link, with its URL (shown now only)'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'forbidden'),
        },
      },
    },
    async (request, reply) => {
      const origin = `${request.protocol}://${request.host}`;
      const link = await links.createLink(deps, currentUser(request), request.body, origin);
      request.log.info({ portalLink: link.id, access: link.access, expiresAt: link.expiresAt }, 'portal link made');
      return reply.status(201).send(link);
    },
  );

  app.get(
    '/webhooks/portal-links',
    {
      onRequest: app.requireRole('host'),
      schema: {
        ...common,
        summary: "The host's portal links, newest first, live or not, each with how often it was used",
        response: { 200: portalLinkListResponse.describe('The links, newest first'), ...problems('unauthorized', 'forbidden') },
      },
    },
    async (request) => links.listLinks(deps, currentUser(request)),
  );

  app.delete(
    '/webhooks/portal-links/:id',
    {
      onRequest: app.requireRole('host'),
      schema: {
        ...common,
        summary: 'Revoke a portal link: it stops working at once (its record and uses stay)',
        params: idParams,
        response: { 204: z.null().describe('Revoked'), ...problems('validation_failed', 'unauthorized', 'forbidden', 'not_found') },
      },
    },
    async (request, reply) => {
      await links.revokeLink(deps, currentUser(request), request.params.id);
      request.log.info({ portalLink: request.params.id }, 'portal link revoked');
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/webhooks/portal-links/:id/uses',
    {
      onRequest: app.requireRole('host'),
      schema: {
        ...common,
        summary: 'Every request made with a portal link (the newest 200): when, which route, from where, and the answer',
        params: idParams,
        response: {
          200: portalLinkUsesResponse.describe("The link's uses, newest first"),
          ...problems('validation_failed', 'unauthorized', 'forbidden', 'not_found'),
        },
      },
    },
    async (request) => links.linkUses(deps, currentUser(request), request.params.id),
  );
}

/**
 * The portal's three files, read once and served from memory, as the dashboard's are (a fixed
 * list: no request path reaches another file). Its own Content-Security-Policy, stricter than the
 * API's: scripts and styles from these files only, requests to this origin only, no frames, no
 * forms posted anywhere. Nothing a receiver answered can run, even if it reached the page as markup.
 */
const PORTAL_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

function portalFiles(app: FastifyInstance) {
  const dir = new URL('../../../public/portal/', import.meta.url);
  const files = [
    { urls: ['/portal', '/portal/'], file: 'index.html', type: 'text/html; charset=utf-8' },
    { urls: ['/portal/portal.js'], file: 'portal.js', type: 'text/javascript; charset=utf-8' },
    { urls: ['/portal/portal.css'], file: 'portal.css', type: 'text/css; charset=utf-8' },
  ];
  for (const { urls, file, type } of files) {
    const body = readFileSync(new URL(file, dir));
    for (const url of urls) {
      app.get(url, { schema: { hide: true } }, async (_request, reply) =>
        reply.type(type).header('cache-control', 'no-cache').header('content-security-policy', PORTAL_CSP).send(body),
      );
    }
  }
}
