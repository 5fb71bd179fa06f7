import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { claimDeliveries } from '../../../src/webhooks/delivery/claim.ts';
import { recordAttempt } from '../../../src/webhooks/delivery/record.ts';
import { listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { webhookKit } from '../../helpers/webhooks.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The rules of a delivery that the other webhook tests take for granted: a 4xx is retried, a stale
 * attempt cannot overwrite a newer claim, a locked delivery is skipped, a disabled endpoint gets no
 * deliveries until a recover, a retry waits for the attempt in flight, recover reads the endpoint's
 * event types, and the sender's attempts reach the worker's metrics.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
let host: Session;
let propertyId: string;
const kit = webhookKit(t, { WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.2,0.2' });
const { receiver, startSender } = kit;

beforeEach(async () => {
  host = await signUp(t.app, 'host');
  propertyId = (await listProperty(t.app, host)).id;
});

afterEach(async () => {
  await kit.closeAll();
  // Each test's claims and counts see its own endpoints only.
  await t.db.db.execute(sql`update webhook_endpoints set enabled = false`);
});

const register = (body: Record<string, unknown>) => kit.register(host, body);
/** A booking event of the host's property; how many deliveries it made. */
const bookingEvent = async (type?: 'booking.created' | 'booking.cancelled') => (await kit.bookingEvent(propertyId, type)).created;
const deliveries = (endpointId: string, status?: string) => kit.deliveries(host, endpointId, status);

const claimOpts = { limit: 10, perEndpoint: 4, perHost: 8, claimed: new Map(), hostClaimed: new Map(), leaseSeconds: 60 };
const recordOpts = { disableAfterHours: 120, attemptsKept: 10 };
const patch = (id: string, payload: Record<string, unknown>) =>
  t.app.inject({ method: 'PATCH', url: `/webhooks/endpoints/${id}`, headers: host.auth, payload });

describe('delivery rules', () => {
  it('retries a 4xx other than 410 on the schedule', async () => {
    const r = await receiver((n) => (n === 1 ? { status: 400, body: 'unknown field' } : { status: 204 }));
    const ep = await register({ url: r.url });
    await bookingEvent();
    startSender();
    await waitFor(async () => (await deliveries(ep.id, 'succeeded')).length === 1, 10_000, 'success after a 400');
    expect((await deliveries(ep.id))[0]!.attempts.map((a) => a.responseStatus)).toEqual([400, 204]);
  });

  it("keeps a stale attempt's result off a newer claim, and keeps the attempt", async () => {
    const ep = await register({ url: 'https://hooks.example.test/fence' });
    await bookingEvent();
    const [claimed] = await claimDeliveries(t.db.pool, claimOpts);
    expect(claimed).toBeDefined();
    // The lease ran out and another worker claimed it meanwhile.
    const newer = randomUUID();
    await t.db.db.execute(sql`update webhook_deliveries set claim_id = ${newer}::uuid where id = ${claimed!.id}`);
    const late = { status: 204, body: '', retryAfterSeconds: null, durationMs: 5, error: null };
    expect(await recordAttempt(t.db.db, claimed!, late, { kind: 'succeeded' }, recordOpts)).toEqual({ settled: false });
    expect(await recordAttempt(t.db.db, claimed!, { ...late, status: 500 }, { kind: 'failed' }, recordOpts)).toMatchObject({
      settled: false,
    });
    const { rows } = await t.db.db.execute<{ status: string; claim_id: string; attempts: number }>(sql`
      select d.status, d.claim_id, (select count(*)::int from webhook_attempts a where a.delivery_id = d.id) as attempts
        from webhook_deliveries d where d.id = ${claimed!.id}`);
    expect(rows[0]).toEqual({ status: 'pending', claim_id: newer, attempts: 2 });
    expect((await deliveries(ep.id))[0]!.status).toBe('pending');
  });

  it('skips a delivery whose row another transaction holds, and takes it once released', async () => {
    await register({ url: 'https://hooks.example.test/locked' });
    await bookingEvent();
    const { rows } = await t.db.db.execute<{ id: string }>(sql`
      select d.id from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
        join users u on u.id = e.host_id where u.email = ${host.user.email}`);
    const holder = await t.db.pool.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1 from webhook_deliveries where id = $1 for update', [rows[0]!.id]);
      expect(await claimDeliveries(t.db.pool, claimOpts)).toEqual([]);
      await holder.query('commit');
    } finally {
      holder.release();
    }
    const claimed = await claimDeliveries(t.db.pool, claimOpts);
    expect(claimed.map((d) => String(d.id))).toEqual([rows[0]!.id]);
  });

  it('gives a disabled endpoint no deliveries; after re-enabling, recover sends what it missed', async () => {
    const r = await receiver();
    const ep = await register({ url: r.url });
    const since = new Date(Date.now() - 1000).toISOString();
    expect((await patch(ep.id, { enabled: false })).statusCode).toBe(200);
    expect(await bookingEvent()).toBe(0);
    expect((await patch(ep.id, { enabled: true })).statusCode).toBe(200);
    startSender();
    expect(await deliveries(ep.id)).toEqual([]);
    const rec = await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/recover`, headers: host.auth, payload: { since } });
    expect(rec.json()).toEqual({ requeued: 0, created: 1 });
    await waitFor(async () => r.received.length === 1, 10_000, 'the missed event');
  });

  it('answers 409 to a retry while an attempt is in flight', async () => {
    const r = await receiver(() => ({ hang: true }));
    const ep = await register({ url: r.url });
    await bookingEvent();
    startSender({ WEBHOOK_TIMEOUT_MS: '10000' });
    await waitFor(async () => r.received.length === 1, 5_000, 'the attempt in flight');
    const [d] = await deliveries(ep.id);
    const retry = await t.app.inject({ method: 'POST', url: `/webhooks/deliveries/${d!.id}/retry`, headers: host.auth });
    expect(retry.statusCode).toBe(409);
    expect((await deliveries(ep.id))[0]!.attempts).toEqual([]); // the attempt's own result decides
  });

  it('claims the next round ahead, starts it only as slots free, and gives what it never started back on stop', async () => {
    const r = await receiver(() => ({ hang: true }));
    const ep = await register({ url: r.url });
    for (let i = 0; i < 5; i++) await bookingEvent();
    const sender = startSender({ WEBHOOK_TIMEOUT_MS: '10000', WEBHOOK_ENDPOINT_CONCURRENCY: '2' });
    await waitFor(async () => r.received.length === 2, 5_000, 'the endpoint to hold its two slots');
    // The round in flight and the next one claimed: four of the five, the fifth still due.
    const state = () =>
      t.db.db.execute<{ claimed: number; attempts: number; due: number }>(sql`
        select count(*) filter (where claim_id is not null)::int as claimed, sum(attempts)::int as attempts,
               count(*) filter (where claim_id is null and next_attempt_at <= now())::int as due
          from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
         where e.public_id = ${ep.id}::uuid`);
    await waitFor(async () => (await state()).rows[0]!.claimed === 4, 5_000, 'the next round claimed');
    expect((await state()).rows[0]).toEqual({ claimed: 4, attempts: 4, due: 1 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received).toHaveLength(2); // the endpoint's cap holds for what was claimed ahead
    // The lease covers a wait in the queue as long as an attempt, the attempt, and 30 s to record
    // it: 2 × (10 s + 5 s connect) + 30 s.
    const { rows: leases } = await t.db.db.execute<{ s: number }>(sql`
      select extract(epoch from d.next_attempt_at - now())::float8 as s
        from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
       where e.public_id = ${ep.id}::uuid and d.claim_id is not null`);
    for (const l of leases) expect(l.s).toBeGreaterThan(55);

    // Stopping gives the two never started back at once, due and uncounted; the two in flight
    // are abandoned to their lease.
    await sender.stop(0);
    expect((await state()).rows[0]).toEqual({ claimed: 2, attempts: 2, due: 3 });
  });

  it('recovers only the event types the endpoint is subscribed to', async () => {
    await bookingEvent('booking.created');
    await bookingEvent('booking.cancelled');
    const since = new Date(Date.now() - 5000).toISOString();
    const ep = await register({ url: 'https://hooks.example.test/cancellations', eventTypes: ['booking.cancelled'] });
    const rec = await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/recover`, headers: host.auth, payload: { since } });
    expect(rec.json()).toEqual({ requeued: 0, created: 1 });
    expect((await deliveries(ep.id)).map((d) => d.eventType)).toEqual(['booking.cancelled']);
  });

  it('sends everything due before runUntilIdle resolves, though a full endpoint makes claims come back empty', async () => {
    const r = await receiver();
    const ep = await register({ url: r.url });
    for (let i = 0; i < 30; i++) await bookingEvent();
    const sender = kit.sender({ WEBHOOK_ENDPOINT_CONCURRENCY: '1', WEBHOOK_HOST_CONCURRENCY: '1' });
    await sender.runUntilIdle();
    expect(r.received).toHaveLength(30);
    expect(await deliveries(ep.id, 'pending')).toEqual([]);
  });

  it("counts the sender's attempts in the worker's metrics by outcome", async () => {
    const r = await receiver((n) => (n === 1 ? { status: 500 } : { status: 204 }));
    await register({ url: r.url });
    const sender = startSender();
    const metrics = createWorkerMetrics(new EventEmitter(), { webhooks: sender.events });
    try {
      await bookingEvent();
      await waitFor(async () => r.received.length === 2, 10_000, 'two attempts');
      await waitFor(async () => (await metrics.registry.metrics()).includes('outcome="succeeded"} 1'), 5_000, 'the success counted');
      const text = await metrics.registry.metrics();
      expect(text).toMatch(/stayhub_webhook_attempts_total\{[^}]*outcome="retry"\} 1/);
      expect(text).toMatch(/stayhub_webhook_attempts_total\{[^}]*outcome="succeeded"\} 1/);
    } finally {
      metrics.detach();
    }
  });
});
