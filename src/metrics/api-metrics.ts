import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client';
import type { Db } from '../db/client.ts';
import type { HandlerCatalogue } from '../outbox/index.ts';
import { registerOutboxGauges } from './outbox-gauges.ts';
import { registerWebhookGauges } from './webhook-gauges.ts';

export interface ApiMetrics {
  registry: Registry;
  /** One finished HTTP request. `route` is the route pattern ('/bookings/:id'), never the raw URL. */
  observeRequest(method: string, route: string, statusCode: number, seconds: number): void;
  /** The status code of one POST /bookings: 201 booked, 409 dates taken, 422 refused by a rule. */
  observeBookingOutcome(statusCode: number): void;
}

export interface ApiMetricsOptions {
  db: Db;
  catalogue: HandlerCatalogue;
  outboxCacheMs?: number;
  onOutboxReadError?: (err: unknown) => void;
  /** OUTBOX_WRITES=wal: the outbox's replication slot, whose lag is a gauge. */
  walSlot?: string;
}

/**
 * The API's metrics, in a registry of its own (not prom-client's global one): each app built —
 * in tests, several per process — gets fresh counters and no "already registered" clash.
 */
export function createApiMetrics(opts: ApiMetricsOptions): ApiMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration by method, route pattern and status code.',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const bookings = new Counter({
    name: 'stayhub_booking_requests_total',
    help: 'POST /bookings responses by status code (201 booked, 409 dates unavailable or key in progress, 422 refused by a rule).',
    labelNames: ['status_code'] as const,
    registers: [registry],
  });
  // The three outcomes the dashboards and alerts care about exist from the start, at 0, so a
  // rate() over them is defined before the first booking.
  for (const code of ['201', '409', '422']) bookings.inc({ status_code: code }, 0);

  registerOutboxGauges(registry, {
    db: opts.db,
    catalogue: opts.catalogue,
    cacheMs: opts.outboxCacheMs,
    onError: opts.onOutboxReadError,
    ...(opts.walSlot === undefined ? {} : { walSlot: opts.walSlot }),
  });
  registerWebhookGauges(registry, { db: opts.db, cacheMs: opts.outboxCacheMs });

  return {
    registry,
    observeRequest: (method, route, statusCode, seconds) => duration.observe({ method, route, status_code: String(statusCode) }, seconds),
    observeBookingOutcome: (statusCode) => bookings.inc({ status_code: String(statusCode) }),
  };
}
