import type { Db } from '../db/client.ts';
import { withTransaction } from '../db/transaction.ts';
import { AppError } from '../errors.ts';
import { decodeCursor, encodeCursor } from '../pagination.ts';
import type { UserRow } from '../users/users.repository.ts';
import { AddressNotAllowedError, checkDestination, isAllowedPort } from './address-policy.ts';
import { WEBHOOK_EVENT_TYPES } from './event-types.ts';
import { takeManualToken, type ManualAction } from './manual-rate.ts';
import { redactUrl } from './redact-url.ts';
import * as repo from './webhooks.repository.ts';
import { SIGNED_HEADERS } from './delivery/exchanged-headers.ts';
import type { CreateEndpointBody, DeliveryResponse, EndpointResponse, UpdateEndpointBody } from './webhooks.schemas.ts';
import { newSecret } from './secret.ts';

/*
 * The webhooks API: a host manages their own endpoints and reads their deliveries; an admin may
 * do the same for every host. Another host's endpoint answers 404, as one that does not exist.
 */

export interface WebhooksDeps {
  db: Db;
  allowPrivateNetworks: boolean;
  secretOverlapHours: number;
  /** WEBHOOK_EXTRA_PORTS */
  extraPorts: readonly number[];
  /** WEBHOOK_MAX_ENDPOINTS_PER_HOST */
  maxEndpointsPerHost: number;
  /** WEBHOOK_MANUAL_SENDS_PER_MINUTE */
  manualSendsPerMinute: number;
}

/** Rotated-out secrets that may sign at once: each one more signature on every request. */
const MAX_OVERLAPPING_SECRETS = 5;

/** 429: the host's budget for a manual action is spent; Retry-After says when a token is back. */
export class ManualRateLimitedError extends AppError {
  constructor(
    action: ManualAction,
    perMinute: number,
    readonly retryAfterSeconds: number,
  ) {
    super('rate_limited', `At most ${perMinute} webhook ${action} requests a minute per host; try again in ${retryAfterSeconds} s`);
  }
}

async function takeToken(deps: WebhooksDeps, hostId: string | number, action: ManualAction): Promise<void> {
  const taken = await takeManualToken(deps.db, Number(hostId), action, deps.manualSendsPerMinute);
  if (!taken.ok) throw new ManualRateLimitedError(action, deps.manualSendsPerMinute, taken.retryAfterSeconds);
}

const hostScope = (user: UserRow): number | null => (user.role === 'admin' ? null : user.id);
const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

function toEndpoint(r: repo.EndpointRow): EndpointResponse {
  const state = !r.enabled ? 'disabled' : r.failing_since ? 'failing' : r.last_success_at ? 'healthy' : 'unused';
  return {
    id: r.public_id,
    url: redactUrl(r.url),
    eventTypes: r.event_types,
    description: r.description,
    enabled: r.enabled,
    disabledReason: r.disabled_reason,
    rateLimitPerSecond: r.rate_limit_per_second,
    createdAt: iso(r.created_at)!,
    updatedAt: iso(r.updated_at)!,
    health: {
      state,
      failingSince: iso(r.failing_since),
      lastSuccessAt: iso(r.last_success_at),
      lastFailureAt: iso(r.last_failure_at),
      pendingDeliveries: r.pending,
      oldestPendingAt: iso(r.oldest_pending_at),
      failedDeliveries: r.failed,
    },
  };
}

function toDelivery(r: repo.DeliveryRow): DeliveryResponse {
  return {
    id: r.public_id,
    endpointId: r.endpoint_public_id,
    eventId: r.event_public_id,
    eventType: r.type,
    status: r.status,
    createdAt: iso(r.created_at)!,
    finishedAt: iso(r.finished_at),
    nextAttemptAt: r.status === 'pending' ? iso(r.next_attempt_at) : null,
    attempts: r.attempts.map((a) => ({ ...a, at: iso(a.at)! })),
  };
}

/**
 * 400 naming body.url when the URL's port is not a web port, or its host is, or resolves to,
 * anything but public addresses. A name that does not resolve (yet) is accepted: the sender checks
 * again before every attempt, so it can never reach a private address later, and the host sees the
 * failures (and can send a test event). The message names the setting that lifts the refusal, for
 * a developer trying webhooks on one machine.
 */
async function checkUrl(deps: WebhooksDeps, url: string): Promise<void> {
  const parsed = new URL(url);
  if (!isAllowedPort(parsed, deps.extraPorts)) {
    throw new AppError('validation_failed', undefined, [
      {
        path: 'body.url',
        message: `port ${parsed.port} is not allowed: webhooks are sent to ports 80, 443 and 1024 and up (others: WEBHOOK_EXTRA_PORTS)`,
      },
    ]);
  }
  try {
    await checkDestination(parsed, deps.allowPrivateNetworks);
  } catch (err) {
    if (!(err instanceof AddressNotAllowedError)) return;
    throw new AppError('validation_failed', undefined, [
      {
        path: 'body.url',
        message: `${err.message}: webhooks are sent to public internet addresses only (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true allows private ones, for development)`,
      },
    ]);
  }
}

const afterCursor = (cursor: string | undefined) => (cursor === undefined ? undefined : decodeCursor(cursor));

function page<R extends { public_id: string }, T>(rows: R[], limit: number, map: (r: R) => T) {
  const items = rows.slice(0, limit);
  return { items: items.map(map), nextCursor: rows.length > limit ? encodeCursor(items.at(-1)!.public_id) : null };
}

async function ownEndpoint(deps: WebhooksDeps, user: UserRow, id: string): Promise<repo.EndpointRow> {
  const row = await repo.findEndpoint(deps.db, hostScope(user), id);
  if (!row) throw new AppError('not_found', 'No such webhook endpoint');
  return row;
}

export async function createEndpoint(deps: WebhooksDeps, user: UserRow, body: CreateEndpointBody) {
  if (user.role !== 'host') throw new AppError('forbidden', 'Only hosts register webhook endpoints, for their own properties');
  await checkUrl(deps, body.url);
  const secret = newSecret();
  const row = await withTransaction(deps.db, (tx) =>
    repo.insertEndpoint(tx, {
      hostId: user.id,
      url: body.url,
      eventTypes: body.eventTypes ?? [...WEBHOOK_EVENT_TYPES],
      description: body.description ?? '',
      rateLimitPerSecond: body.rateLimitPerSecond ?? null,
      secret,
      maxPerHost: deps.maxEndpointsPerHost,
    }),
  );
  if (!row) {
    throw new AppError(
      'conflict',
      `A host may register at most ${deps.maxEndpointsPerHost} webhook endpoints (WEBHOOK_MAX_ENDPOINTS_PER_HOST): delete one first`,
    );
  }
  return { ...toEndpoint(row), secret };
}

export async function listEndpoints(deps: WebhooksDeps, user: UserRow, limit: number, cursor?: string) {
  const rows = await repo.listEndpoints(deps.db, hostScope(user), limit + 1, afterCursor(cursor));
  return page(rows, limit, toEndpoint);
}

export async function getEndpoint(deps: WebhooksDeps, user: UserRow, id: string) {
  return toEndpoint(await ownEndpoint(deps, user, id));
}

export async function updateEndpoint(deps: WebhooksDeps, user: UserRow, id: string, body: UpdateEndpointBody) {
  const row = await ownEndpoint(deps, user, id);
  if (body.url !== undefined) await checkUrl(deps, body.url);
  await repo.updateEndpoint(deps.db, row.id, body);
  return toEndpoint((await repo.findEndpoint(deps.db, null, id))!);
}

export async function deleteEndpoint(deps: WebhooksDeps, user: UserRow, id: string): Promise<void> {
  const row = await ownEndpoint(deps, user, id);
  await repo.deleteEndpoint(deps.db, row.id);
}

export async function rotateSecret(deps: WebhooksDeps, user: UserRow, id: string) {
  const row = await ownEndpoint(deps, user, id);
  const secret = newSecret();
  if (!(await repo.rotateSecret(deps.db, row.id, secret, deps.secretOverlapHours, MAX_OVERLAPPING_SECRETS))) {
    throw new AppError(
      'conflict',
      `${MAX_OVERLAPPING_SECRETS} rotated secrets still sign beside the current one: rotate again when the oldest overlap has ended`,
    );
  }
  return { ...toEndpoint((await repo.findEndpoint(deps.db, null, id))!), secret };
}

export async function sendTest(deps: WebhooksDeps, user: UserRow, id: string, eventType?: string) {
  const row = await ownEndpoint(deps, user, id);
  if (!row.enabled) throw new AppError('conflict', 'The endpoint is disabled: enable it first (PATCH {"enabled": true})');
  await takeToken(deps, row.host_id, 'test');
  const deliveryId = await repo.insertTestDelivery(deps.db, row, eventType);
  return toDelivery((await repo.findDelivery(deps.db, null, deliveryId))!);
}

export async function listDeliveries(
  deps: WebhooksDeps,
  user: UserRow,
  id: string,
  q: { status?: 'pending' | 'succeeded' | 'failed'; limit: number; cursor?: string; eventType?: string; since?: string; until?: string },
) {
  const row = await ownEndpoint(deps, user, id);
  const rows = await repo.listDeliveries(deps.db, row.id, {
    status: q.status,
    eventType: q.eventType,
    since: q.since,
    until: q.until,
    limit: q.limit + 1,
    afterPublicId: afterCursor(q.cursor),
  });
  return page(rows, q.limit, toDelivery);
}

export async function retryDelivery(deps: WebhooksDeps, user: UserRow, deliveryId: string) {
  const row = await repo.findDelivery(deps.db, hostScope(user), deliveryId);
  if (!row) throw new AppError('not_found', 'No such webhook delivery');
  await takeToken(deps, row.host_id, 'retry');
  if (!(await repo.retryDelivery(deps.db, row.id))) {
    throw new AppError('conflict', 'An attempt of this delivery is in flight: its result decides what happens next');
  }
  return toDelivery((await repo.findDelivery(deps.db, null, deliveryId))!);
}

export async function recover(deps: WebhooksDeps, user: UserRow, id: string, since: string) {
  const row = await ownEndpoint(deps, user, id);
  await takeToken(deps, row.host_id, 'recover');
  return repo.recover(deps.db, row, since);
}

/** The dashboard's Webhooks section: every host's endpoints, the troubled first, with their recent failures. */
export async function endpointsForAdmin(deps: WebhooksDeps) {
  const rows = await repo.listEndpointsForAdmin(deps.db, 100);
  return {
    items: rows.map((r) => ({
      ...toEndpoint(r),
      hostEmail: r.host_email,
      recentFailures: r.recent_failures.map((f) => ({ ...f, at: iso(f.at)! })),
    })),
  };
}

/** Sent with every attempt (src/webhooks/delivery/attempt.ts); shown beside a delivery as its request. */
const SENT_HEADERS = { 'content-type': 'application/json', 'user-agent': 'StayHub-Webhooks/1.0' };

/** jsonb keeps an object's keys in its own order: the signed headers are shown in the order they are sent. */
function inSentOrder(request: Record<string, string>): Record<string, string> {
  return Object.fromEntries(SIGNED_HEADERS.filter((h) => request[h] !== undefined).map((h) => [h, request[h]!]));
}

/** One delivery with what its attempts sent: the portal's view of a request and its answers. */
export async function getDelivery(deps: WebhooksDeps, user: UserRow, deliveryId: string) {
  const row = await repo.findDelivery(deps.db, hostScope(user), deliveryId, { withHeaders: true });
  if (!row) throw new AppError('not_found', 'No such webhook delivery');
  const endpoint = (await repo.findEndpoint(deps.db, hostScope(user), row.endpoint_public_id))!;
  return {
    ...toDelivery(row),
    attempts: row.attempts.map(({ headers, ...a }) => ({
      ...a,
      at: iso(a.at)!,
      requestHeaders: headers?.request ? inSentOrder(headers.request) : null,
      responseHeaders: headers?.response?.headers ?? null,
      responseHeadersOmitted: headers?.response?.omitted ?? 0,
    })),
    request: {
      method: 'POST' as const,
      url: redactUrl(endpoint.url),
      headers: { ...SENT_HEADERS, 'webhook-id': row.public_id },
      body: await repo.deliveryBody(deps.db, row.id),
    },
  };
}

/** Each endpoint's attempts and successes over the last hour and day, what is in flight, and its last failure. */
export async function endpointActivity(deps: WebhooksDeps, user: UserRow) {
  const rows = await repo.endpointActivity(deps.db, hostScope(user), 100);
  return {
    items: rows.map((r) => ({
      endpointId: r.endpoint_public_id,
      lastHour: { attempts: r.hour_attempts, succeeded: r.hour_succeeded },
      lastDay: { attempts: r.day_attempts, succeeded: r.day_succeeded },
      inFlight: r.in_flight,
      lastFailure: r.last_failure ? { ...r.last_failure, at: iso(r.last_failure.at)! } : null,
    })),
  };
}
