import { randomUUID } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { Tx } from '../db/transaction.ts';
import type { ExchangedHeaders } from './delivery/exchanged-headers.ts';
import { TEST_EVENT_TYPE } from './event-types.ts';

/*
 * The webhooks API's SQL. Scoping is a parameter: `hostId` limits every statement to one host's
 * endpoints (a host), null lets an admin through; the service decides which.
 */

/** Internal ids (bigint) arrive as strings and only go back into SQL. */
export type EndpointRow = {
  id: string;
  public_id: string;
  host_id: string;
  url: string;
  event_types: string[];
  description: string;
  enabled: boolean;
  disabled_reason: string | null;
  rate_limit_per_second: number | null;
  created_at: Date;
  updated_at: Date;
  failing_since: Date | null;
  last_success_at: Date | null;
  last_failure_at: Date | null;
  pending: number;
  oldest_pending_at: Date | null;
  failed: number;
};

const scope = (hostId: number | null): SQL => (hostId === null ? sql`true` : sql`e.host_id = ${hostId}`);

/** An endpoint's columns and its health, read from its deliveries (webhook_deliveries_due_idx covers the pending ones). */
const ENDPOINT_COLUMNS = sql`
  e.id, e.public_id, e.host_id, e.url, e.event_types, e.description, e.enabled, e.disabled_reason, e.rate_limit_per_second,
  e.created_at, e.updated_at, e.failing_since, e.last_success_at, e.last_failure_at,
  (select count(*)::int from webhook_deliveries d where d.endpoint_id = e.id and d.status = 'pending') as pending,
  (select min(d.created_at) from webhook_deliveries d where d.endpoint_id = e.id and d.status = 'pending') as oldest_pending_at,
  (select count(*)::int from webhook_deliveries d where d.endpoint_id = e.id and d.status = 'failed') as failed`;

/**
 * Registers an endpoint unless its host has `maxPerHost` already: null then. The host's
 * transaction-scoped advisory lock serialises its registrations, so two at once cannot both see
 * room for one (a count alone, under READ COMMITTED, would let both in).
 */
export async function insertEndpoint(
  tx: Tx,
  v: {
    hostId: number;
    url: string;
    eventTypes: string[];
    description: string;
    rateLimitPerSecond: number | null;
    secret: string;
    maxPerHost: number;
  },
): Promise<EndpointRow | null> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended('webhook-endpoints-of-host', ${v.hostId}))`);
  const { rows } = await tx.execute<EndpointRow>(sql`
    with e as (
      insert into webhook_endpoints (host_id, url, event_types, description, rate_limit_per_second, secret)
      select ${v.hostId}, ${v.url}, ${sql.param(v.eventTypes)}::text[], ${v.description}, ${v.rateLimitPerSecond}::int, ${v.secret}
       where (select count(*) from webhook_endpoints where host_id = ${v.hostId}) < ${v.maxPerHost}
      returning *
    )
    select ${ENDPOINT_COLUMNS} from e`);
  return rows[0] ?? null;
}

export async function findEndpoint(db: Db, hostId: number | null, publicId: string): Promise<EndpointRow | undefined> {
  const { rows } = await db.execute<EndpointRow>(sql`
    select ${ENDPOINT_COLUMNS} from webhook_endpoints e where e.public_id = ${publicId}::uuid and ${scope(hostId)}`);
  return rows[0];
}

/** Newest first; keyset on the internal id through the last endpoint's public id. */
export async function listEndpoints(db: Db, hostId: number | null, limit: number, afterPublicId?: string): Promise<EndpointRow[]> {
  const after = afterPublicId ? sql`and e.id < (select id from webhook_endpoints where public_id = ${afterPublicId}::uuid)` : sql``;
  const { rows } = await db.execute<EndpointRow>(sql`
    select ${ENDPOINT_COLUMNS} from webhook_endpoints e where ${scope(hostId)} ${after} order by e.id desc limit ${limit}`);
  return rows;
}

export async function updateEndpoint(
  db: Db,
  id: string,
  v: { url?: string; eventTypes?: string[]; description?: string; enabled?: boolean; rateLimitPerSecond?: number | null },
): Promise<void> {
  const sets: SQL[] = [sql`updated_at = now()`];
  if (v.url !== undefined) sets.push(sql`url = ${v.url}`);
  if (v.eventTypes !== undefined) sets.push(sql`event_types = ${sql.param(v.eventTypes)}::text[]`);
  if (v.description !== undefined) sets.push(sql`description = ${v.description}`);
  if (v.rateLimitPerSecond !== undefined) sets.push(sql`rate_limit_per_second = ${v.rateLimitPerSecond}::int`);
  if (v.enabled === true) sets.push(sql`enabled = true, disabled_reason = null, failing_since = null`);
  if (v.enabled === false) sets.push(sql`enabled = false, disabled_reason = null`);
  await db.execute(sql`update webhook_endpoints set ${sql.join(sets, sql`, `)} where id = ${id}`);
}

export async function deleteEndpoint(db: Db, id: string): Promise<void> {
  await db.execute(sql`delete from webhook_endpoints where id = ${id}`);
}

/**
 * The current secret is retired: it keeps signing beside the new one for `overlapHours`, and so
 * does every secret retired before whose own overlap has not ended (expired ones are dropped).
 * At most `maxRetired` may overlap at once: past that, nothing changes and false is returned.
 */
export async function rotateSecret(db: Db, id: string, secret: string, overlapHours: number, maxRetired: number): Promise<boolean> {
  const { rows } = await db.execute(sql`
    with live as (
      select e.id, coalesce(jsonb_agg(s) filter (where s is not null), '[]'::jsonb) as secrets
        from webhook_endpoints e
        left join lateral jsonb_array_elements(e.retired_secrets) s on (s->>'expiresAt')::timestamptz > now()
       where e.id = ${id}
       group by e.id
    )
    update webhook_endpoints e
       set retired_secrets = live.secrets || jsonb_build_array(jsonb_build_object(
             'secret', e.secret,
             'expiresAt', now() + make_interval(secs => ${overlapHours * 3600}::double precision))),
           secret = ${secret}, updated_at = now()
      from live
     where e.id = live.id and jsonb_array_length(live.secrets) < ${maxRetired}
    returning e.id`);
  return rows.length === 1;
}

/**
 * A test event for one endpoint, and its delivery, due now. Returns the delivery's public id.
 * `webhook.test` by default; a booking type makes a sample of that event, marked `"test": true`,
 * so a receiver's handling of the real thing can be tried before a guest books.
 */
export async function insertTestDelivery(
  db: Db,
  endpoint: { id: string; host_id: string; public_id: string },
  type: string = TEST_EVENT_TYPE,
): Promise<string> {
  const eventId = randomUUID();
  const occurredAt = new Date();
  const body = JSON.stringify(
    type === TEST_EVENT_TYPE
      ? {
          type: TEST_EVENT_TYPE,
          eventId,
          occurredAt: occurredAt.toISOString(),
          data: { endpointId: endpoint.public_id, message: 'A test event from StayHub: answer 2xx to acknowledge it.' },
        }
      : sampleBookingEvent(type, eventId, occurredAt),
  );
  const { rows } = await db.execute<{ public_id: string }>(sql`
    with event as (
      insert into webhook_events (public_id, host_id, type, body, occurred_at)
      values (${eventId}::uuid, ${endpoint.host_id}, ${type}, ${body}, ${occurredAt.toISOString()}::timestamptz)
      returning id
    )
    insert into webhook_deliveries (event_id, endpoint_id) select id, ${endpoint.id} from event returning public_id`);
  return rows[0]!.public_id;
}

/** A booking event's shape (docs/webhooks.md, "What a host receives") with sample values and `test: true`. */
function sampleBookingEvent(type: string, eventId: string, occurredAt: Date) {
  const bookingId = randomUUID();
  const cancelled = type === 'booking.cancelled';
  return {
    type,
    eventId,
    occurredAt: occurredAt.toISOString(),
    version: cancelled ? 2 : 1,
    test: true,
    data: {
      bookingId,
      propertyId: randomUUID(),
      propertyTitle: 'Sample property (a test event)',
      checkIn: '2030-01-04',
      checkOut: '2030-01-07',
      guests: 2,
      nights: 3,
      total: 36400,
      currency: 'EUR',
      idempotencyKey: `${cancelled ? 'booking-cancelled' : 'booking-created'}:${bookingId}`,
      ...(cancelled ? { cancelledBy: 'guest' } : {}),
    },
  };
}

export type DeliveryRow = {
  id: string;
  host_id: string;
  public_id: string;
  endpoint_public_id: string;
  event_public_id: string;
  type: string;
  status: 'pending' | 'succeeded' | 'failed';
  claim_id: string | null;
  created_at: Date;
  finished_at: Date | null;
  next_attempt_at: Date;
  attempts: {
    at: string;
    responseStatus: number | null;
    durationMs: number;
    responseBody: string | null;
    error: string | null;
    traceId: string | null;
    /** Only in findDelivery's `withHeaders` read: webhook_attempts.headers, null before it was kept. */
    headers?: ExchangedHeaders | null;
  }[];
};

/*
 * An attempt's headers (up to ~16 KiB each) are read only for one delivery's detail, never for a
 * page of deliveries, whose attempts stay as small as they were.
 */
const deliveryColumns = (withHeaders = false) => sql`
  d.id, e.host_id, d.public_id, e.public_id as endpoint_public_id, ev.public_id as event_public_id, ev.type, d.status, d.claim_id,
  d.created_at, d.finished_at, d.next_attempt_at,
  coalesce((
    select json_agg(json_build_object('at', a.attempted_at, 'responseStatus', a.response_status, 'durationMs', a.duration_ms,
                                      'responseBody', a.response_body, 'error', a.error, 'traceId', a.trace_id
                                      ${withHeaders ? sql`, 'headers', a.headers` : sql``}) order by a.id)
      from webhook_attempts a where a.delivery_id = d.id
  ), '[]') as attempts`;
const DELIVERY_COLUMNS = deliveryColumns();

export async function listDeliveries(
  db: Db,
  endpointId: string,
  opts: { status?: string; limit: number; afterPublicId?: string; eventType?: string; since?: string; until?: string },
): Promise<DeliveryRow[]> {
  const status = opts.status ? sql`and d.status = ${opts.status}` : sql``;
  const type = opts.eventType ? sql`and ev.type = ${opts.eventType}` : sql``;
  const since = opts.since ? sql`and d.created_at >= ${opts.since}::timestamptz` : sql``;
  const until = opts.until ? sql`and d.created_at < ${opts.until}::timestamptz` : sql``;
  const after = opts.afterPublicId
    ? sql`and d.id < (select id from webhook_deliveries where public_id = ${opts.afterPublicId}::uuid)`
    : sql``;
  const { rows } = await db.execute<DeliveryRow>(sql`
    select ${DELIVERY_COLUMNS}
      from webhook_deliveries d
      join webhook_endpoints e on e.id = d.endpoint_id
      join webhook_events ev on ev.id = d.event_id
     where d.endpoint_id = ${endpointId} ${status} ${type} ${since} ${until} ${after}
     order by d.id desc
     limit ${opts.limit}`);
  return rows;
}

export async function findDelivery(
  db: Db,
  hostId: number | null,
  publicId: string,
  opts: { withHeaders?: boolean } = {},
): Promise<DeliveryRow | undefined> {
  const { rows } = await db.execute<DeliveryRow>(sql`
    select ${deliveryColumns(opts.withHeaders)}
      from webhook_deliveries d
      join webhook_endpoints e on e.id = d.endpoint_id
      join webhook_events ev on ev.id = d.event_id
     where d.public_id = ${publicId}::uuid and ${scope(hostId)}`);
  return rows[0];
}

/**
 * A new round for one delivery: pending, due now, its attempt count back to 0 (the history stays).
 * Not while an attempt is in flight (claim_id set): false then.
 */
export async function retryDelivery(db: Db, id: string): Promise<boolean> {
  const { rows } = await db.execute(sql`
    update webhook_deliveries
       set status = 'pending', attempts = 0, next_attempt_at = now(), finished_at = null
     where id = ${id} and claim_id is null
    returning id`);
  return rows.length === 1;
}

/**
 * Everything an endpoint should have had since `since`, again: its failed deliveries get a new
 * round, and the host's events it never had a delivery for (it was added, enabled or subscribed
 * later) get one now. One transaction-free statement each: both are idempotent.
 */
export async function recover(
  db: Db,
  endpoint: { id: string; host_id: string; event_types: string[] },
  since: string,
): Promise<{ requeued: number; created: number }> {
  const requeued = await db.execute(sql`
    update webhook_deliveries
       set status = 'pending', attempts = 0, next_attempt_at = now(), finished_at = null
     where endpoint_id = ${endpoint.id} and status = 'failed' and created_at >= ${since}::timestamptz
    returning id`);
  const created = await db.execute(sql`
    insert into webhook_deliveries (event_id, endpoint_id)
    select ev.id, ${endpoint.id}
      from webhook_events ev
     where ev.host_id = ${endpoint.host_id} and ev.occurred_at >= ${since}::timestamptz
       and ev.type = any(${sql.param(endpoint.event_types)}::text[])
    on conflict (event_id, endpoint_id) do nothing
    returning id`);
  return { requeued: requeued.rows.length, created: created.rows.length };
}

export type AdminEndpointRow = EndpointRow & {
  host_email: string;
  recent_failures: {
    deliveryId: string;
    eventType: string;
    at: string;
    responseStatus: number | null;
    error: string | null;
    traceId: string | null;
  }[];
};

/**
 * Every endpoint for the admin view, the troubled first (disabled by the system, failing, most
 * pending), each with its last five failed attempts.
 */
export async function listEndpointsForAdmin(db: Db, limit: number): Promise<AdminEndpointRow[]> {
  const { rows } = await db.execute<AdminEndpointRow>(sql`
    select ${ENDPOINT_COLUMNS}, u.email as host_email,
           coalesce((
             select json_agg(f order by f.at desc) from (
               select d.public_id as "deliveryId", ev.type as "eventType", a.attempted_at as "at",
                      a.response_status as "responseStatus", a.error, a.trace_id as "traceId"
                 from webhook_deliveries d
                 join webhook_attempts a on a.delivery_id = d.id
                 join webhook_events ev on ev.id = d.event_id
                where d.endpoint_id = e.id and (a.response_status is null or a.response_status not between 200 and 299)
                order by a.id desc limit 5) f
           ), '[]') as recent_failures
      from webhook_endpoints e join users u on u.id = e.host_id
     order by (not e.enabled and e.disabled_reason is not null) desc, e.failing_since asc nulls last, e.id desc
     limit ${limit}`);
  return rows;
}

/** The event's exact body, as every attempt of the delivery sent it (the portal's "request"). */
export async function deliveryBody(db: Db, deliveryId: string): Promise<string> {
  const { rows } = await db.execute<{ body: string }>(sql`
    select ev.body from webhook_deliveries d join webhook_events ev on ev.id = d.event_id where d.id = ${deliveryId}`);
  return rows[0]?.body ?? '';
}

export type EndpointActivityRow = {
  endpoint_public_id: string;
  hour_attempts: number;
  hour_succeeded: number;
  day_attempts: number;
  day_succeeded: number;
  in_flight: number;
  last_failure: {
    deliveryId: string;
    at: string;
    responseStatus: number | null;
    error: string | null;
    responseBody: string | null;
  } | null;
};

/**
 * What the portal shows of each endpoint at a glance, beside its health: its attempts and
 * successes over the last hour and day, what is claimed by a sender now, and its last failed
 * attempt with its reason. The day's attempts are read through the attempts' time index
 * (webhook_attempts_attempted_idx), so an endpoint's older history is never scanned.
 */
export async function endpointActivity(db: Db, hostId: number | null, limit: number): Promise<EndpointActivityRow[]> {
  const { rows } = await db.execute<EndpointActivityRow>(sql`
    select e.public_id as endpoint_public_id,
           coalesce(s.hour_attempts, 0)::int as hour_attempts, coalesce(s.hour_succeeded, 0)::int as hour_succeeded,
           coalesce(s.day_attempts, 0)::int as day_attempts, coalesce(s.day_succeeded, 0)::int as day_succeeded,
           (select count(*)::int from webhook_deliveries d
             where d.endpoint_id = e.id and d.status = 'pending' and d.claim_id is not null) as in_flight,
           (select json_build_object('deliveryId', d.public_id, 'at', a.attempted_at, 'responseStatus', a.response_status,
                                     'error', a.error, 'responseBody', left(a.response_body, 200))
              from webhook_deliveries d join webhook_attempts a on a.delivery_id = d.id
             where d.endpoint_id = e.id and (a.response_status is null or a.response_status not between 200 and 299)
             order by a.id desc limit 1) as last_failure
      from webhook_endpoints e
      left join lateral (
        select count(*) filter (where a.attempted_at > now() - interval '1 hour') as hour_attempts,
               count(*) filter (where a.attempted_at > now() - interval '1 hour' and a.response_status between 200 and 299) as hour_succeeded,
               count(*) as day_attempts,
               count(*) filter (where a.response_status between 200 and 299) as day_succeeded
          from webhook_attempts a join webhook_deliveries d on d.id = a.delivery_id
         where a.attempted_at > now() - interval '1 day' and d.endpoint_id = e.id
      ) s on true
     where ${scope(hostId)}
     order by e.id desc
     limit ${limit}`);
  return rows;
}
