import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { publicBody } from '../events/subjects.ts';
import type { PayloadOf } from '../messages/topics.ts';
import { activeTraceContext } from '../telemetry/tracing.ts';
import { BOOKING_VERSION, type WebhookEventType } from './event-types.ts';

/** The JSON every endpoint is sent for a booking event: the stream's body plus type, occurredAt and version. */
export function webhookBody(
  type: WebhookEventType,
  eventId: string,
  occurredAt: Date,
  payload: PayloadOf<'booking.created'> | PayloadOf<'booking.cancelled'>,
): string {
  return JSON.stringify({
    type,
    eventId,
    occurredAt: occurredAt.toISOString(),
    version: BOOKING_VERSION[type],
    data: publicBody(payload),
  });
}

/**
 * A booking event → the host's webhook event and one delivery per enabled endpoint of the host
 * subscribed to its type, in one statement (and so one transaction).
 *
 * Idempotent per (event, endpoint): the event is keyed by the outbox message's id and each delivery
 * by (event, endpoint), so a handler that runs twice (at-least-once) creates nothing twice. Only
 * endpoints that existed when the event happened get it; one added later asks for older events
 * with `recover`. The event is recorded even for a host without endpoints: that is what a recover
 * reads. A property that does not exist (never in production; events written by hand) records nothing.
 *
 * Each delivery keeps the active trace context (the handler's span, tracing on): its first attempt
 * continues the booking's trace.
 *
 * Returns how many deliveries were created.
 */
export async function recordBookingEvent(
  db: Db,
  e: { type: WebhookEventType; eventId: string; occurredAt: Date; payload: PayloadOf<'booking.created'> | PayloadOf<'booking.cancelled'> },
): Promise<number> {
  const body = webhookBody(e.type, e.eventId, e.occurredAt, e.payload);
  const trace = activeTraceContext();
  const { rows } = await db.execute<{ n: number }>(sql`
    with event as (
      insert into webhook_events (public_id, host_id, type, body, occurred_at)
      select ${e.eventId}::uuid, p.host_id, ${e.type}, ${body}, ${e.occurredAt.toISOString()}::timestamptz
        from properties p where p.public_id = ${e.payload.propertyId}::uuid
      on conflict (public_id) do update set public_id = excluded.public_id -- a re-run: the existing row, for its id
      returning id, host_id, occurred_at
    ),
    deliveries as (
      insert into webhook_deliveries (event_id, endpoint_id, traceparent, tracestate)
      select event.id, ep.id, ${trace?.traceparent ?? null}, ${trace?.tracestate ?? null}
        from event
        join webhook_endpoints ep
          on ep.host_id = event.host_id and ep.enabled and ${e.type} = any(ep.event_types) and ep.created_at <= event.occurred_at
      on conflict (event_id, endpoint_id) do nothing
      returning 1
    )
    select count(*)::int as n from deliveries`);
  return rows[0]?.n ?? 0;
}
