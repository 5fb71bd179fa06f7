import { sql } from 'drizzle-orm';
import { bigint, bigserial, check, index, integer, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import { ts } from './columns.ts';
import { users } from './users.ts';

/*
 * Links a host hands on to their developer: the webhook portal without the host's password
 * (src/webhooks/portal-links.service.ts, docs/webhooks.md "Portal"). A link is a bearer token
 * scoped to its host's endpoints, read-only or full, valid until it expires or is revoked; each
 * request made with it is written down.
 */

export const PORTAL_LINK_ACCESS = ['read', 'full'] as const;

export const webhookPortalLinks = pgTable(
  'webhook_portal_links',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    publicId: uuid('public_id').notNull().defaultRandom().unique(),
    hostId: bigint('host_id', { mode: 'number' })
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    /** SHA-256 of the token: the token itself is shown once, in the link, and never stored. */
    tokenHash: text('token_hash').notNull().unique(),
    access: text('access', { enum: PORTAL_LINK_ACCESS }).notNull(),
    /** Who the host gave it to, in the host's words. */
    label: text('label').notNull().default(''),
    createdAt: ts('created_at').notNull().defaultNow(),
    expiresAt: ts('expires_at').notNull(),
    revokedAt: ts('revoked_at'),
  },
  (t) => [
    check('webhook_portal_links_access_check', sql`${t.access} in ('read', 'full')`),
    index('webhook_portal_links_host_idx').on(t.hostId, t.id),
  ],
);

/** Every request made with a portal link: when, what (the route's pattern, never its query), from where, and the answer. */
export const webhookPortalLinkUses = pgTable(
  'webhook_portal_link_uses',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    linkId: bigint('link_id', { mode: 'number' })
      .notNull()
      .references(() => webhookPortalLinks.id, { onDelete: 'cascade' }),
    at: ts('at').notNull().defaultNow(),
    method: text('method').notNull(),
    route: text('route').notNull(),
    /** The endpoint or delivery id the request named, if any. */
    target: uuid('target'),
    statusCode: integer('status_code').notNull(),
    ip: text('ip').notNull(),
    userAgent: text('user_agent').notNull().default(''),
  },
  (t) => [index('webhook_portal_link_uses_link_idx').on(t.linkId, t.id)],
);
