import { Gauge, type Registry } from 'prom-client';
import type { Db } from '../db/client.ts';
import { webhookStats, type EndpointStats } from '../webhooks/stats.ts';

/**
 * Each webhook endpoint's health as gauges, read from the database when Prometheus scrapes (one
 * query, cached `cacheMs` like the outbox's gauges). Labelled by the endpoint's public id, which
 * the admin view (GET /admin/webhooks) names and links: one series per endpoint, for the
 * `maxEndpoints` most worth watching only (failing, disabled by the system, most pending), so the
 * scrape stays the same size however many endpoints hosts register.
 *
 *   stayhub_webhook_endpoint_pending_deliveries{endpoint}
 *   stayhub_webhook_endpoint_oldest_pending_seconds{endpoint}
 *   stayhub_webhook_endpoint_failing_seconds{endpoint}     0 when its last attempt succeeded
 *   stayhub_webhook_endpoint_failed_deliveries{endpoint}   failed for good, not retried
 *   stayhub_webhook_endpoint_enabled{endpoint}
 */
export function registerWebhookGauges(registry: Registry, opts: { db: Db; cacheMs?: number; maxEndpoints?: number }): void {
  const cacheMs = opts.cacheMs ?? 5_000;
  const maxEndpoints = opts.maxEndpoints ?? 100;
  let cached: { at: number; value: Promise<EndpointStats[] | null> } | undefined;
  let applied: Promise<EndpointStats[] | null> | undefined;
  let applying: Promise<void> = Promise.resolve();
  function collect(): Promise<void> {
    if (!cached || Date.now() - cached.at >= cacheMs)
      cached = { at: Date.now(), value: webhookStats(opts.db, maxEndpoints).catch(() => null) };
    if (cached.value !== applied) {
      applied = cached.value;
      applying = cached.value.then(apply);
    }
    return applying;
  }
  const gauge = (name: string, help: string) =>
    new Gauge({ name, help, labelNames: ['endpoint'] as const, registers: [registry], collect });
  const pending = gauge('stayhub_webhook_endpoint_pending_deliveries', 'Deliveries waiting to be sent or retried, by endpoint.');
  const oldest = gauge('stayhub_webhook_endpoint_oldest_pending_seconds', 'Age of the oldest pending delivery, by endpoint; 0 when none.');
  const failing = gauge(
    'stayhub_webhook_endpoint_failing_seconds',
    'Time since the first failed attempt after the last success, by endpoint; 0 when the last attempt succeeded or the endpoint is disabled.',
  );
  const failed = gauge('stayhub_webhook_endpoint_failed_deliveries', 'Deliveries that failed for good and were not retried, by endpoint.');
  const enabled = gauge('stayhub_webhook_endpoint_enabled', '1 if the endpoint is enabled, 0 if disabled (by the system or its host).');

  function apply(stats: EndpointStats[] | null) {
    for (const g of [pending, oldest, failing, failed, enabled]) g.reset();
    for (const s of stats ?? []) {
      const l = { endpoint: s.endpointId };
      pending.set(l, s.pending);
      oldest.set(l, s.oldestPendingSeconds);
      failing.set(l, s.failingSeconds);
      failed.set(l, s.failed);
      enabled.set(l, s.enabled ? 1 : 0);
    }
  }
}
