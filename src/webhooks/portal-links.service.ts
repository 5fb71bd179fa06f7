import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../db/client.ts';
import { AppError } from '../errors.ts';
import type { UserRow } from '../users/users.repository.ts';
import * as repo from './portal-links.repository.ts';
import type { CreatePortalLinkBody } from './portal-links.schemas.ts';

/*
 * Portal links: a host hands its developer the webhook portal without handing over its password.
 * A link is a bearer token (`whpl_` + 32 random bytes, base64url) that the webhooks API accepts in
 * place of the host's session, for the host's endpoints only, read-only or full, until it expires
 * or is revoked. Only its SHA-256 is stored; the token is in the URL's fragment, which browsers do
 * not send to servers, so it reaches no access log. A link cannot make or revoke links.
 */

export interface PortalLinkDeps {
  db: Db;
  /** WEBHOOK_PORTAL_LINK_MAX_MINUTES */
  maxMinutes: number;
}

/** Told apart from a session token by its prefix, so the API looks each up in its own table. */
export const LINK_TOKEN_PREFIX = 'whpl_';

export const hashLinkToken = (token: string) => createHash('sha256').update(token).digest('hex');

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

function toLink(r: repo.PortalLinkRow, now = Date.now()) {
  const state = r.revoked_at ? 'revoked' : new Date(r.expires_at).getTime() <= now ? 'expired' : 'live';
  return {
    id: r.public_id,
    access: r.access,
    label: r.label,
    state,
    createdAt: iso(r.created_at)!,
    expiresAt: iso(r.expires_at)!,
    revokedAt: iso(r.revoked_at),
    uses: r.uses,
    lastUsedAt: iso(r.last_used_at),
  } as const;
}

function ownHost(user: UserRow): number {
  if (user.role !== 'host') throw new AppError('forbidden', 'Only hosts make portal links, for their own endpoints');
  return user.id;
}

/** `origin`: where the portal is served, as the request that asked for the link reached us. */
export async function createLink(deps: PortalLinkDeps, user: UserRow, body: CreatePortalLinkBody, origin: string) {
  const hostId = ownHost(user);
  if (body.expiresInMinutes > deps.maxMinutes) {
    throw new AppError('validation_failed', undefined, [
      { path: 'body.expiresInMinutes', message: `must be at most ${deps.maxMinutes} (WEBHOOK_PORTAL_LINK_MAX_MINUTES)` },
    ]);
  }
  const token = LINK_TOKEN_PREFIX + randomBytes(32).toString('base64url');
  const row = await repo.insertLink(deps.db, {
    hostId,
    tokenHash: hashLinkToken(token),
    access: body.access,
    label: body.label ?? '',
    minutes: body.expiresInMinutes,
  });
  return { ...toLink(row), url: `${origin}/portal/#link=${token}` };
}

export async function listLinks(deps: PortalLinkDeps, user: UserRow) {
  return { items: (await repo.listLinks(deps.db, ownHost(user), 100)).map((r) => toLink(r)) };
}

async function ownLink(deps: PortalLinkDeps, user: UserRow, id: string) {
  const row = await repo.findLink(deps.db, ownHost(user), id);
  if (!row) throw new AppError('not_found', 'No such portal link');
  return row;
}

export async function revokeLink(deps: PortalLinkDeps, user: UserRow, id: string): Promise<void> {
  await repo.revokeLink(deps.db, (await ownLink(deps, user, id)).id);
}

export async function linkUses(deps: PortalLinkDeps, user: UserRow, id: string) {
  const rows = await repo.listUses(deps.db, (await ownLink(deps, user, id)).id, 200);
  return {
    items: rows.map((u) => ({
      at: iso(u.at)!,
      method: u.method,
      route: u.route,
      target: u.target,
      statusCode: u.status_code,
      ip: u.ip,
      userAgent: u.user_agent,
    })),
  };
}

/** The link a token belongs to, live or not; undefined for a token no link ever had. */
export async function presentedLink(db: Db, token: string): Promise<repo.PresentedLink | undefined> {
  return repo.findByTokenHash(db, hashLinkToken(token));
}

export const recordUse = repo.insertUse;
