import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Db } from '../../db/client.ts';
import { AppError } from '../../errors.ts';
import { bearerToken } from '../plugins/auth.ts';
import type { PresentedLink } from '../../webhooks/portal-links.repository.ts';
import { LINK_TOKEN_PREFIX, presentedLink, recordUse } from '../../webhooks/portal-links.service.ts';

/*
 * The webhooks API accepts a portal link where it accepts a host's session: the same routes, the
 * same service functions, scoped to the link's host exactly as the host's own session is (so the
 * portal opened by a link shows what the host's portal shows, through the same API). A read-only
 * link may only read. Every request that presents a link, refused ones included, is written down.
 */

/** Which link a request came with; a WeakMap, so the API's request type stays as it is. */
const links = new WeakMap<FastifyRequest, PresentedLink>();

export const linkOf = (request: FastifyRequest): PresentedLink | undefined => links.get(request);

export type Need = 'read' | 'full';

/**
 * onRequest hook: a portal link (live; full access for `need: 'full'`) or else what
 * `requireRole(...roles)` accepts.
 */
export function hostOrLink(app: FastifyInstance, db: Db, need: Need, roles: ('host' | 'admin')[] = ['host', 'admin']) {
  const bySession = app.requireRole(...roles);
  return async (request: FastifyRequest) => {
    const token = bearerToken(request);
    if (!token?.startsWith(LINK_TOKEN_PREFIX)) return bySession(request);
    const link = await presentedLink(db, token);
    if (!link) throw new AppError('unauthorized', 'A valid bearer token is required');
    links.set(request, link);
    if (!link.live) throw new AppError('unauthorized', 'This portal link has expired or was revoked: ask the host for a new one');
    if (need === 'full' && link.access !== 'full') throw new AppError('forbidden', 'This portal link is read-only');
    request.user = link.host;
  };
}

/**
 * onSend hook for the routes that accept links: one row per request made with a link, written
 * before the answer leaves, so a client that has its answer finds its use recorded (and the uses
 * of one client's requests in the order it made them). The route's pattern and the id it named,
 * never the URL (a query string may carry what must not be kept). A failure to write is logged,
 * not thrown: the work is done, and the answer says how it went.
 */
export function auditLinkUse(db: Db) {
  return async <T>(request: FastifyRequest, reply: FastifyReply, payload: T): Promise<T> => {
    const link = links.get(request);
    if (!link) return payload;
    const id = (request.params as { id?: unknown } | undefined)?.id;
    try {
      await recordUse(db, {
        linkId: link.id,
        method: request.method,
        route: request.routeOptions.url ?? request.url.split('?', 1)[0]!,
        target: typeof id === 'string' && /^[0-9a-f-]{36}$/i.test(id) ? id : null,
        statusCode: reply.statusCode,
        ip: request.ip,
        userAgent: String(request.headers['user-agent'] ?? '').slice(0, 300),
      });
    } catch (err) {
      request.log.error({ err, portalLink: link.public_id }, 'portal link use not recorded');
    }
    return payload;
  };
}
