import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { users } from '../db/schema.ts';
import type { UserRow } from '../users/users.repository.ts';

/*
 * The portal links' SQL. Every statement that reads or changes a link names its host: a host
 * reaches only its own links, and a link only its own host.
 */

/** Internal ids (bigint) arrive as strings and only go back into SQL. */
export type PortalLinkRow = {
  id: string;
  public_id: string;
  host_id: string;
  access: 'read' | 'full';
  label: string;
  created_at: Date;
  expires_at: Date;
  revoked_at: Date | null;
  uses: number;
  last_used_at: Date | null;
};

const LINK_COLUMNS = sql`
  l.id, l.public_id, l.host_id, l.access, l.label, l.created_at, l.expires_at, l.revoked_at,
  (select count(*)::int from webhook_portal_link_uses u where u.link_id = l.id) as uses,
  (select max(u.at) from webhook_portal_link_uses u where u.link_id = l.id) as last_used_at`;

export async function insertLink(
  db: Db,
  v: { hostId: number; tokenHash: string; access: 'read' | 'full'; label: string; minutes: number },
): Promise<PortalLinkRow> {
  const { rows } = await db.execute<PortalLinkRow>(sql`
    with l as (
      insert into webhook_portal_links (host_id, token_hash, access, label, expires_at)
      values (${v.hostId}, ${v.tokenHash}, ${v.access}, ${v.label}, now() + make_interval(mins => ${v.minutes}))
      returning *
    )
    select ${LINK_COLUMNS} from l`);
  return rows[0]!;
}

export async function listLinks(db: Db, hostId: number, limit: number): Promise<PortalLinkRow[]> {
  const { rows } = await db.execute<PortalLinkRow>(sql`
    select ${LINK_COLUMNS} from webhook_portal_links l where l.host_id = ${hostId} order by l.id desc limit ${limit}`);
  return rows;
}

export async function findLink(db: Db, hostId: number, publicId: string): Promise<PortalLinkRow | undefined> {
  const { rows } = await db.execute<PortalLinkRow>(sql`
    select ${LINK_COLUMNS} from webhook_portal_links l where l.public_id = ${publicId}::uuid and l.host_id = ${hostId}`);
  return rows[0];
}

/** Revoking twice keeps the first time. */
export async function revokeLink(db: Db, id: string): Promise<void> {
  await db.execute(sql`update webhook_portal_links set revoked_at = coalesce(revoked_at, now()) where id = ${id}`);
}

/** What a presented token is: its link, whether it is live now (by the database's clock), and its host. */
export type PresentedLink = {
  id: string;
  public_id: string;
  access: 'read' | 'full';
  expires_at: Date;
  live: boolean;
  host: UserRow;
};

/** By the token's hash, expired and revoked ones too: a use of a dead link is written down as well. */
export async function findByTokenHash(db: Db, tokenHash: string): Promise<PresentedLink | undefined> {
  const { rows } = await db.execute<{
    id: string;
    public_id: string;
    access: 'read' | 'full';
    expires_at: Date;
    live: boolean;
    host_id: string;
  }>(sql`
    select l.id, l.public_id, l.access, l.expires_at, l.host_id,
           (l.revoked_at is null and l.expires_at > now()) as live
      from webhook_portal_links l where l.token_hash = ${tokenHash}`);
  const link = rows[0];
  if (!link) return undefined;
  const [host] = await db
    .select()
    .from(users)
    .where(sql`${users.id} = ${link.host_id}`);
  if (!host) return undefined;
  return { id: link.id, public_id: link.public_id, access: link.access, expires_at: new Date(link.expires_at), live: link.live, host };
}

export async function insertUse(
  db: Db,
  v: { linkId: string; method: string; route: string; target: string | null; statusCode: number; ip: string; userAgent: string },
): Promise<void> {
  await db.execute(sql`
    insert into webhook_portal_link_uses (link_id, method, route, target, status_code, ip, user_agent)
    values (${v.linkId}, ${v.method}, ${v.route}, ${v.target}::uuid, ${v.statusCode}, ${v.ip}, ${v.userAgent})`);
}

export type LinkUseRow = {
  at: Date;
  method: string;
  route: string;
  target: string | null;
  status_code: number;
  ip: string;
  user_agent: string;
};

export async function listUses(db: Db, linkId: string, limit: number): Promise<LinkUseRow[]> {
  const { rows } = await db.execute<LinkUseRow>(sql`
    select at, method, route, target, status_code, ip, user_agent
      from webhook_portal_link_uses where link_id = ${linkId} order by id desc limit ${limit}`);
  return rows;
}
