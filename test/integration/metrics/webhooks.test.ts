import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { EventEmitter } from 'node:events';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { Registry } from 'prom-client';
import { registerWebhookGauges } from '../../../src/metrics/webhook-gauges.ts';
import { createWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { skipWithout } from '../../helpers/tools.ts';

/*
 * Seeing webhooks: the API's per-endpoint gauges, the worker's attempt counters, and the alert on an
 * endpoint that keeps failing (prometheus/webhooks-alerts.yml, unit-tested with promtool when it is
 * installed; with CI set a missing promtool fails, never skips).
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
const dir = new URL('../../../prometheus/', import.meta.url);

const gauge = (text: string, name: string, endpoint: string) => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{endpoint="${endpoint}"}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
};

describe('webhook metrics', () => {
  it("the API's /metrics reports each endpoint's pending deliveries, oldest age, failing time and state", async () => {
    const host = await signUp(t.app, 'host');
    await listProperty(t.app, host);
    const created = await t.app.inject({
      method: 'POST',
      url: '/webhooks/endpoints',
      headers: host.auth,
      payload: { url: 'http://127.0.0.1:9999/down' },
    });
    const endpoint = created.json().id as string;
    await t.db.db.execute(sql`
      with ep as (update webhook_endpoints set failing_since = now() - interval '2 hours' where public_id = ${endpoint}::uuid returning id, host_id),
           ev as (insert into webhook_events (public_id, host_id, type, body, occurred_at)
                  select gen_random_uuid(), host_id, 'booking.created', '{}', now() - interval '90 minutes' from ep returning id)
      insert into webhook_deliveries (event_id, endpoint_id, created_at) select ev.id, ep.id, now() - interval '90 minutes' from ev, ep`);

    const text = (await t.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(gauge(text, 'stayhub_webhook_endpoint_pending_deliveries', endpoint)).toBe(1);
    expect(gauge(text, 'stayhub_webhook_endpoint_oldest_pending_seconds', endpoint)).toBeGreaterThanOrEqual(5400);
    expect(gauge(text, 'stayhub_webhook_endpoint_failing_seconds', endpoint)).toBeGreaterThanOrEqual(7200);
    expect(gauge(text, 'stayhub_webhook_endpoint_enabled', endpoint)).toBe(1);
    expect(gauge(text, 'stayhub_webhook_endpoint_failed_deliveries', endpoint)).toBe(0);
  });

  it("the worker's /metrics counts attempts by outcome, and times them, with no series per endpoint", async () => {
    const worker = new EventEmitter();
    const webhooks = new EventEmitter();
    const metrics = createWorkerMetrics(worker, { webhooks });
    webhooks.emit('attempt', { endpointId: 'e1', eventType: 'booking.created', outcome: 'retry', status: 500, durationMs: 120 });
    webhooks.emit('attempt', { endpointId: 'e2', eventType: 'booking.created', outcome: 'succeeded', status: 204, durationMs: 30 });
    const text = await metrics.registry.metrics();
    expect(text).toContain('stayhub_webhook_attempts_total{outcome="retry"} 1');
    expect(text).toContain('stayhub_webhook_attempts_total{outcome="succeeded"} 1');
    expect(text).toContain('stayhub_webhook_attempt_duration_seconds_count 2');
    expect(text).not.toContain('endpoint="');
    metrics.detach();
  });

  it("the worker's /metrics shows who holds the webhook slots by rank and count, never by owner, and first attempts' delays", async () => {
    const webhooks = Object.assign(new EventEmitter(), {
      // Twelve owners in flight: only the five holding the most are reported, by rank.
      slots: () => ({
        slots: 32,
        inFlight: 28,
        queued: 40,
        ownersInFlight: 12,
        ownersAtCap: 1,
        ownersWaiting: 2,
        topOwners: [8, 4, 3, 3, 2],
        longestQueuedMs: 12_500,
      }),
    });
    const metrics = createWorkerMetrics(new EventEmitter(), { webhooks });
    webhooks.emit('started', { attempt: 1, waitMs: 40 });
    webhooks.emit('started', { attempt: 1, waitMs: 20_000 });
    webhooks.emit('started', { attempt: 3, waitMs: 90_000 }); // a retry: its wait is the schedule's, not the slots'
    const text = await metrics.registry.metrics();
    const value = (series: string) =>
      Number(
        text
          .split('\n')
          .find((l) => l.startsWith(`${series} `))
          ?.split(' ')[1],
      );
    expect(value('stayhub_webhook_slots')).toBe(32);
    expect(value('stayhub_webhook_slots_in_use')).toBe(28);
    expect(value('stayhub_webhook_queued_deliveries')).toBe(40);
    expect(value('stayhub_webhook_owners_in_flight')).toBe(12);
    expect(value('stayhub_webhook_owners_at_cap')).toBe(1);
    expect(value('stayhub_webhook_owners_waiting')).toBe(2);
    expect(value('stayhub_webhook_longest_queued_seconds')).toBe(12.5);
    expect(text.split('\n').filter((l) => l.startsWith('stayhub_webhook_owner_slots_in_use{'))).toEqual([
      'stayhub_webhook_owner_slots_in_use{rank="1"} 8',
      'stayhub_webhook_owner_slots_in_use{rank="2"} 4',
      'stayhub_webhook_owner_slots_in_use{rank="3"} 3',
      'stayhub_webhook_owner_slots_in_use{rank="4"} 3',
      'stayhub_webhook_owner_slots_in_use{rank="5"} 2',
    ]);
    expect(value('stayhub_webhook_first_attempt_delay_seconds_count')).toBe(2);
    expect(value('stayhub_webhook_first_attempt_delay_seconds_bucket{le="0.05"}')).toBe(1);
    expect(value('stayhub_webhook_first_attempt_delay_seconds_bucket{le="15"}')).toBe(1);
    expect(text).not.toMatch(/owner="|host="|endpoint="/);
    metrics.detach();
  });

  it("the API's per-endpoint series stop at 100, the failing endpoint among them", async () => {
    const host = await signUp(t.app, 'host');
    await t.db.db.execute(sql`
      insert into webhook_endpoints (host_id, url, event_types, secret)
      select u.id, 'https://hooks.example.test/' || n, '{booking.created}', 'whsec_x'
        from users u, generate_series(1, 300) n where u.email = ${host.user.email}`);
    const { rows } = await t.db.db.execute<{ public_id: string }>(sql`
      insert into webhook_endpoints (host_id, url, event_types, secret, failing_since)
      select u.id, 'https://hooks.example.test/failing', '{booking.created}', 'whsec_x', now() - interval '1 hour'
        from users u where u.email = ${host.user.email}
      returning public_id`);
    const registry = new Registry();
    registerWebhookGauges(registry, { db: t.db.db, cacheMs: 0 });
    const text = await registry.metrics();
    expect(text.split('\n').filter((l) => l.startsWith('stayhub_webhook_endpoint_enabled{'))).toHaveLength(100);
    expect(gauge(text, 'stayhub_webhook_endpoint_failing_seconds', rows[0]!.public_id)).toBeGreaterThanOrEqual(3600);
  });

  it('prometheus.yml loads the webhook alerts, and each has a severity and a runbook', () => {
    const prom = parse(readFileSync(new URL('prometheus.yml', dir), 'utf8')) as { rule_files: string[] };
    expect(prom.rule_files).toContain('webhooks-alerts.yml');
    const file = parse(readFileSync(new URL('webhooks-alerts.yml', dir), 'utf8')) as {
      groups: { rules: { alert: string; labels: Record<string, string>; annotations: Record<string, string> }[] }[];
    };
    const alerts = file.groups.flatMap((g) => g.rules);
    expect(alerts.map((a) => a.alert)).toEqual(['WebhookEndpointFailing', 'WebhookSlotsExhausted']);
    for (const a of alerts) {
      expect(a.labels.severity).toBeTruthy();
      expect(a.annotations.runbook).toMatch(/^docs\/webhooks\.md#/);
    }
  });

  it.skipIf(skipWithout('promtool', undefined, 'Debian: apt-get install -y prometheus'))(
    'the alerts pass promtool check and their unit tests',
    () => {
      const promtool = (...args: string[]) => execFileSync('promtool', args, { cwd: dir, encoding: 'utf8', stdio: 'pipe' });
      expect(promtool('check', 'rules', 'webhooks-alerts.yml')).toMatch(/SUCCESS/);
      expect(promtool('test', 'rules', 'webhooks-alerts.test.yml')).toMatch(/SUCCESS/);
    },
  );
});
