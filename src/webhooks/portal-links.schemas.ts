import { z } from 'zod';
import { PORTAL_LINK_ACCESS } from '../db/schema.ts';
import { displayText } from '../validation.ts';

/* The portal links' shapes: validation, the TS types and the OpenAPI document come from here. */

export const createPortalLinkBody = z.strictObject({
  access: z
    .enum(PORTAL_LINK_ACCESS)
    .describe('read: see endpoints and deliveries; full: also change, test, retry, recover, rotate and delete, as the host can.'),
  expiresInMinutes: z.coerce
    .number()
    .int()
    .min(5)
    .max(7 * 24 * 60)
    .default(60)
    .describe('How long the link works (at most WEBHOOK_PORTAL_LINK_MAX_MINUTES). Default 60.'),
  label: displayText(0, 200).optional().describe('Who the link is for, for the list of links.'),
});
export type CreatePortalLinkBody = z.infer<typeof createPortalLinkBody>;

export const portalLinkResponse = z.object({
  id: z.string().uuid(),
  access: z.enum(PORTAL_LINK_ACCESS),
  label: z.string(),
  state: z.enum(['live', 'expired', 'revoked']),
  createdAt: z.string(),
  expiresAt: z.string(),
  revokedAt: z.string().nullable(),
  uses: z.number().int().describe('Requests made with the link.'),
  lastUsedAt: z.string().nullable(),
});

export const portalLinkWithUrlResponse = portalLinkResponse.extend({
  url: z.string().describe('The portal with the link in its fragment (never sent to a server). Shown now only: it is not stored.'),
});

export const portalLinkListResponse = z.object({ items: z.array(portalLinkResponse) });

export const portalLinkUsesResponse = z.object({
  items: z.array(
    z.object({
      at: z.string(),
      method: z.string(),
      route: z.string().describe("The route's pattern, e.g. /webhooks/endpoints/:id; never a query string."),
      target: z.string().uuid().nullable().describe('The endpoint or delivery the request named.'),
      statusCode: z.number().int(),
      ip: z.string(),
      userAgent: z.string(),
    }),
  ),
});

export const portalSessionResponse = z.object({
  host: z.object({ id: z.string().uuid(), name: z.string() }),
  via: z.enum(['session', 'link']),
  access: z.enum(PORTAL_LINK_ACCESS),
  expiresAt: z.string().nullable().describe('When the portal link ends; null for a signed-in host.'),
  secretOverlapHours: z.number().describe('WEBHOOK_SECRET_OVERLAP_HOURS: how long a rotated-out secret keeps signing.'),
  eventTypes: z.array(z.string()).describe('The types a test event may have.'),
});
