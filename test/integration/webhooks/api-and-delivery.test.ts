import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMailer } from '../../../src/mail/mailer.ts';
import { HandlerRegistry, housekeepOnce } from '../../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../../../src/search/postgres-search-index.ts';
import { recordBookingEvent } from '../../../src/webhooks/fan-out.ts';
import { appChores } from '../../../src/worker/chores.ts';
import { defaultHandlers } from '../../../src/worker/handlers/index.ts';
import { createUser } from '../../../src/users/auth.service.ts';
import { buildTestApp, daysFromNow, listProperty, signUp, uniqueEmail, useTestApp, type Session } from '../../helpers/app.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { waitFor } from '../../helpers/wait.ts';
import { webhookKit } from '../../helpers/webhooks.ts';

/*
 * Webhooks to hosts' systems, against real HTTP receivers on free ports: the API a host uses, the
 * fan-out from the outbox, the sender's signatures (checked by the `standardwebhooks` package),
 * retries, Retry-After, 410, disabling, isolation of a hanging endpoint, rotation, recover.
 * Receivers listen on 127.0.0.1, so this app allows private networks; the SSRF refusals are
 * checked on a second app that does not.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });

let host: Session;
let otherHost: Session;
let guest: Session;
let propertyId: string;
const kit = webhookKit(t, { WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.2,0.2' });
const { receiver, register, senderConfig, startSender } = kit;
/** A booking event of the host's property, as the outbox worker's fan-out handler records it. */
const bookingEvent = (type?: 'booking.created' | 'booking.cancelled', bookingId?: string) => kit.bookingEvent(propertyId, type, bookingId);
const deliveries = (endpointId: string, status?: string) => kit.deliveries(host, endpointId, status);

beforeAll(async () => {
  host = await signUp(t.app, 'host', 'Hanna Host');
  otherHost = await signUp(t.app, 'host', 'Otto Other');
  guest = await signUp(t.app, 'guest', 'Gus Guest');
  propertyId = (await listProperty(t.app, host)).id;
});

afterEach(() => kit.closeAll());

async function disableAll() {
  await t.db.db.execute(sql`update webhook_endpoints set enabled = false`);
}

describe('the webhooks API', () => {
  afterEach(disableAll);

  it('registers an endpoint with every booking event by default and shows its secret once', async () => {
    const created = await register(host, { url: 'https://hooks.example.test/stayhub', description: 'Channel manager' });
    expect(created.eventTypes).toEqual(['booking.created', 'booking.cancelled']);
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(Buffer.from(created.secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24);

    const got = await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${created.id}`, headers: host.auth });
    expect(got.statusCode).toBe(200);
    expect(got.json()).not.toHaveProperty('secret');
    expect(got.json()).toMatchObject({
      url: 'https://hooks.example.test/stayhub',
      enabled: true,
      health: { state: 'unused', pendingDeliveries: 0 },
    });

    const rotated = await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${created.id}/rotate-secret`, headers: host.auth });
    expect(rotated.statusCode).toBe(200);
    expect(rotated.json().secret).toMatch(/^whsec_/);
    expect(rotated.json().secret).not.toBe(created.secret);
  });

  it('refuses bad input with a 400 naming the field, and creates nothing', async () => {
    const before = (await t.app.inject({ method: 'GET', url: '/webhooks/endpoints?limit=100', headers: host.auth })).json().items.length;
    const cases: [Record<string, unknown>, string][] = [
      [{ url: 'ftp://files.example.test/x' }, 'body.url'],
      [{ url: 'not a url' }, 'body.url'],
      [{ url: 'https://hooks.example.test/', eventTypes: ['booking.exploded'] }, 'body.eventTypes.0'],
      [{ url: 'https://hooks.example.test/', eventTypes: [] }, 'body.eventTypes'],
      [{ url: 'https://hooks.example.test/', colour: 'red' }, 'body'],
    ];
    for (const [payload, path] of cases) {
      const res = await t.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: host.auth, payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
    }
    const after = (await t.app.inject({ method: 'GET', url: '/webhooks/endpoints?limit=100', headers: host.auth })).json().items.length;
    expect(after).toBe(before);
  });

  it('keeps hosts apart: another host cannot see or touch an endpoint, a guest cannot register, an admin sees all', async () => {
    const mine = await register(host, { url: 'https://hooks.example.test/mine' });
    for (const [method, url] of [
      ['GET', `/webhooks/endpoints/${mine.id}`],
      ['PATCH', `/webhooks/endpoints/${mine.id}`],
      ['DELETE', `/webhooks/endpoints/${mine.id}`],
      ['POST', `/webhooks/endpoints/${mine.id}/rotate-secret`],
      ['POST', `/webhooks/endpoints/${mine.id}/test`],
      ['GET', `/webhooks/endpoints/${mine.id}/deliveries`],
      ['POST', `/webhooks/endpoints/${mine.id}/recover`],
    ] as const) {
      const payload = method === 'PATCH' ? { enabled: false } : url.endsWith('recover') ? { since: new Date(0).toISOString() } : undefined;
      const res = await t.app.inject({ method, url, headers: otherHost.auth, payload });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
    }
    const list = (await t.app.inject({ method: 'GET', url: '/webhooks/endpoints?limit=100', headers: otherHost.auth })).json();
    expect(list.items.map((e: { id: string }) => e.id)).not.toContain(mine.id);
    const stillThere = await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${mine.id}`, headers: host.auth });
    expect(stillThere.json().enabled).toBe(true);

    const byGuest = await t.app.inject({
      method: 'POST',
      url: '/webhooks/endpoints',
      headers: guest.auth,
      payload: { url: 'https://a.example.test/' },
    });
    expect(byGuest.statusCode).toBe(403);

    const email = uniqueEmail('admin');
    await createUser(t.db.db, { email, password: 'operator password 1', name: 'Ops', role: 'admin' });
    const login = await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'operator password 1' } });
    const admin = { authorization: `Bearer ${login.json().token}` };
    const all = (await t.app.inject({ method: 'GET', url: '/webhooks/endpoints?limit=100', headers: admin })).json();
    expect(all.items.map((e: { id: string }) => e.id)).toContain(mine.id);
    const viaAdmin = await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${mine.id}/deliveries`, headers: admin });
    expect(viaAdmin.statusCode).toBe(200);
  });

  it('refuses loopback, private, link-local and disguised addresses when private networks are not allowed', async () => {
    const strict = await buildTestApp(t.db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'false' });
    try {
      const session = await signUp(strict.app, 'host');
      for (const url of [
        'http://127.0.0.1:8080/hook',
        'http://10.1.2.3/hook',
        'http://169.254.169.254/latest/meta-data/',
        'http://localhost:3000/hook',
        'http://[::1]/hook',
        'http://2130706433/hook', // 127.0.0.1, decimal-encoded
        'http://[::ffff:10.0.0.1]/hook',
        'http://100.64.0.1/hook',
        'http://192.168.1.10/hook',
      ]) {
        const res = await strict.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: session.auth, payload: { url } });
        expect(res.statusCode, url).toBe(400);
        expect(res.json().errors[0]).toMatchObject({ path: 'body.url' });
        expect(res.json().errors[0].message).toMatch(/public internet/);
      }
      const list = await strict.app.inject({ method: 'GET', url: '/webhooks/endpoints', headers: session.auth });
      expect(list.json().items).toEqual([]);
    } finally {
      await strict.app.close();
    }
  });
});

describe('delivery', () => {
  afterEach(disableAll);
  // A host of its own per test: a recover reads every event of the host since a time.
  beforeEach(async () => {
    host = await signUp(t.app, 'host', 'Hanna Host');
    propertyId = (await listProperty(t.app, host)).id;
  });

  it('sends a booking and its cancellation from the outbox, signed so that standardwebhooks verifies it', async () => {
    const r = await receiver();
    const endpoint = await register(host, { url: r.url });
    const onlyCancellations = await receiver();
    await register(host, { url: onlyCancellations.url, eventTypes: ['booking.cancelled'] });
    const someoneElses = await receiver();
    await register(otherHost, { url: someoneElses.url });

    const booked = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: guest.auth,
      payload: { propertyId, checkIn: daysFromNow(30), checkOut: daysFromNow(33), guests: 2 },
    });
    expect(booked.statusCode, booked.body).toBe(201);
    const cancelled = await t.app.inject({ method: 'POST', url: `/bookings/${booked.json().id}/cancel`, headers: guest.auth });
    expect(cancelled.statusCode).toBe(200);

    // The real worker path: the outbox worker with the real handlers, then the sender.
    const config = senderConfig();
    const { logger } = captureLogger();
    const mailer = createMailer(config);
    const searchIndex = createPostgresSearchIndex({ ...searchIndexOptions(config), applicationName: 'test-search' });
    const sender = startSender();
    const registry = new HandlerRegistry(defaultHandlers({ config, db: t.db.db, mailer, logger, searchIndex, webhooks: sender }));
    const worker = createConfiguredWorker({ db: t.db.db, config, registry, logger, listen: false, housekeeping: false });
    try {
      await worker.runUntilEmpty();
      await worker.stop();
    } finally {
      mailer.close();
      await searchIndex.close();
    }
    await waitFor(async () => r.received.length === 2 && onlyCancellations.received.length === 1, 15_000, 'both endpoints served');

    const wh = new Webhook(endpoint.secret);
    const bodies = r.received.map((m) => wh.verify(m.body, m.headers as Record<string, string>) as Record<string, any>);
    const byType = Object.fromEntries(bodies.map((b) => [b.type, b]));
    expect(byType['booking.created']).toMatchObject({
      version: 1,
      data: { bookingId: booked.json().id, propertyId, total: expect.any(Number) },
    });
    expect(byType['booking.cancelled']).toMatchObject({ version: 2, data: { bookingId: booked.json().id, cancelledBy: 'guest' } });
    expect(Date.parse(byType['booking.created'].occurredAt)).not.toBeNaN();
    for (const m of r.received) {
      expect(m.body).not.toContain(guest.user.email);
      expect(m.body).not.toContain('Gus Guest');
      expect(m.headers['webhook-id']).toMatch(/^[0-9a-f-]{36}$/);
      expect(m.headers['content-type']).toBe('application/json');
    }
    expect(JSON.parse(onlyCancellations.received[0]!.body).type).toBe('booking.cancelled');
    expect(someoneElses.received).toEqual([]);

    const listed = await waitFor(
      async () => {
        const l = await deliveries(endpoint.id, 'succeeded');
        return l.length === 2 && l;
      },
      10_000,
      'both deliveries recorded',
    );
    expect(listed[0]!.attempts).toEqual([expect.objectContaining({ responseStatus: 204, error: null })]);
  });

  it('creates a delivery once per (event, endpoint), however often the fan-out runs, and none for endpoints added later', async () => {
    const r = await receiver();
    await register(host, { url: r.url });
    const eventId = randomUUID();
    const payload = bookingPayload({ propertyId });
    const occurredAt = new Date();
    expect(await recordBookingEvent(t.db.db, { type: 'booking.created', eventId, occurredAt, payload })).toBe(1);
    expect(await recordBookingEvent(t.db.db, { type: 'booking.created', eventId, occurredAt, payload })).toBe(0);
    const later = await register(host, { url: r.url });
    expect(await recordBookingEvent(t.db.db, { type: 'booking.created', eventId, occurredAt, payload })).toBe(0);
    expect(await deliveries(later.id)).toEqual([]);

    // A recover gives the later endpoint what it missed.
    const rec = await t.app.inject({
      method: 'POST',
      url: `/webhooks/endpoints/${later.id}/recover`,
      headers: host.auth,
      payload: { since: new Date(occurredAt.getTime() - 1000).toISOString() },
    });
    expect(rec.statusCode, rec.body).toBe(202);
    expect(rec.json()).toEqual({ requeued: 0, created: 1 });
    startSender();
    await waitFor(async () => r.received.length === 2, 10_000, 'the recovered event');
    expect(new Set(r.received.map((m) => JSON.parse(m.body).eventId))).toEqual(new Set([eventId]));
    expect(new Set(r.received.map((m) => m.headers['webhook-id'])).size).toBe(2); // one delivery per endpoint
  });

  it('retries a 500 on the schedule with the same webhook-id, then succeeds', async () => {
    const r = await receiver((n) => (n <= 2 ? { status: 500, body: 'database is down' } : { status: 200, body: 'ok' }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    startSender();
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 1, 10_000, 'success after retries');
    expect(r.received).toHaveLength(3);
    expect(new Set(r.received.map((m) => m.headers['webhook-id'])).size).toBe(1);
    const [d] = await deliveries(endpoint.id);
    expect(d!.attempts.map((a) => a.responseStatus)).toEqual([500, 500, 200]);
    expect(d!.attempts[0]).toMatchObject({ responseBody: 'database is down' });
    const health = (await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${endpoint.id}`, headers: host.auth })).json().health;
    expect(health).toMatchObject({ state: 'healthy', failingSince: null });
  });

  it('gives up after the last attempt, keeps the delivery as failed, and sends it again on retry', async () => {
    let up = false;
    const r = await receiver(() => (up ? { status: 204 } : { status: 502 }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    startSender({ WEBHOOK_TIMEOUT_MS: '500' });
    const [failed] = await waitFor(
      async () => {
        const f = await deliveries(endpoint.id, 'failed');
        return f.length === 1 && f;
      },
      10_000,
      'the delivery to fail for good',
    );
    expect(failed!.attempts.map((a) => a.responseStatus)).toEqual([502, 502, 502]); // schedule of 2 delays = 3 attempts
    const health = (await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${endpoint.id}`, headers: host.auth })).json().health;
    expect(health).toMatchObject({ state: 'failing', failedDeliveries: 1 });

    up = true;
    const retry = await t.app.inject({ method: 'POST', url: `/webhooks/deliveries/${failed!.id}/retry`, headers: host.auth });
    expect(retry.statusCode, retry.body).toBe(202);
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 1, 10_000, 'the retried delivery');
    expect(r.received).toHaveLength(4);
    const other = await t.app.inject({ method: 'POST', url: `/webhooks/deliveries/${failed!.id}/retry`, headers: otherHost.auth });
    expect(other.statusCode).toBe(404);
  });

  it("shows an admin every host's endpoints, the failing first, with their last failures", async () => {
    const r = await receiver(() => ({ status: 503, body: 'maintenance' }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    startSender();
    await waitFor(async () => (await deliveries(endpoint.id, 'failed')).length === 1, 10_000, 'a failed delivery');
    const email = uniqueEmail('admin');
    await createUser(t.db.db, { email, password: 'operator password 1', name: 'Ops', role: 'admin' });
    const login = await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'operator password 1' } });
    const view = await t.app.inject({ method: 'GET', url: '/admin/webhooks', headers: { authorization: `Bearer ${login.json().token}` } });
    expect(view.statusCode, view.body).toBe(200);
    const first = view.json().items[0];
    expect(first).toMatchObject({ id: endpoint.id, hostEmail: host.user.email, health: { state: 'failing', failedDeliveries: 1 } });
    expect(first.recentFailures).toHaveLength(3);
    expect(first.recentFailures[0]).toMatchObject({ eventType: 'booking.created', responseStatus: 503, error: null });
    expect((await t.app.inject({ method: 'GET', url: '/admin/webhooks', headers: host.auth })).statusCode).toBe(403);
  });

  it('counts a timeout as a failed attempt and tries again', async () => {
    const r = await receiver((n) => (n === 1 ? { hang: true } : { status: 204 }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    startSender({ WEBHOOK_TIMEOUT_MS: '300' });
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 1, 10_000, 'success after a timeout');
    const [d] = await deliveries(endpoint.id);
    expect(d!.attempts[0]).toMatchObject({ responseStatus: null, error: 'timed out after 300 ms' });
    expect(d!.attempts[1]).toMatchObject({ responseStatus: 204 });
  });

  it("waits as long as a 429's Retry-After asks before the next attempt", async () => {
    const r = await receiver((n) => (n === 1 ? { status: 429, headers: { 'retry-after': '2' } } : { status: 204 }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    startSender({ WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.1,0.1,5' });
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 1, 10_000, 'success after Retry-After');
    // Timing is the behaviour here: the schedule alone would have tried again after 0.1 s.
    expect(r.received[1]!.at - r.received[0]!.at).toBeGreaterThanOrEqual(1900);
  });

  it('disables an endpoint that answers 410 Gone at once, and tells its host through the outbox', async () => {
    const r = await receiver(() => ({ status: 410 }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    await bookingEvent();
    startSender({ WEBHOOK_ENDPOINT_CONCURRENCY: '1' });
    await waitFor(async () => (await deliveries(endpoint.id, 'failed')).length >= 1, 10_000, 'the 410');
    const got = (await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${endpoint.id}`, headers: host.auth })).json();
    expect(got).toMatchObject({ enabled: false, disabledReason: 'it answered 410 Gone', health: { state: 'disabled' } });
    expect(r.received).toHaveLength(1); // the second event waits for the endpoint to be enabled again
    const { rows } = await t.db.db.execute<{ payload: Record<string, string> }>(
      sql`select payload from outbox where topic = 'webhook.endpoint-disabled' and payload->>'endpointId' = ${endpoint.id}`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.payload).toMatchObject({ hostEmail: host.user.email, url: r.url, reason: 'it answered 410 Gone' });
  });

  it('disables an endpoint that has failed for WEBHOOK_DISABLE_AFTER_HOURS, once', async () => {
    const r = await receiver(() => ({ status: 500 }));
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    startSender({ WEBHOOK_DISABLE_AFTER_HOURS: '0.0001', WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.3,0.3,0.3,0.3' }); // 0.36 s
    await waitFor(
      async () =>
        (await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${endpoint.id}`, headers: host.auth })).json().enabled === false,
      10_000,
      'the endpoint to be disabled',
    );
    const got = (await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${endpoint.id}`, headers: host.auth })).json();
    expect(got.disabledReason).toMatch(/every delivery has failed for 0.0001 hours/);
    const { rows } = await t.db.db.execute(
      sql`select 1 from outbox where topic = 'webhook.endpoint-disabled' and payload->>'endpointId' = ${endpoint.id}`,
    );
    expect(rows).toHaveLength(1);

    // Enabling it again resumes the pending delivery, with a fresh failing clock.
    r.answer = () => ({ status: 204 });
    const patch = await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/endpoints/${endpoint.id}`,
      headers: host.auth,
      payload: { enabled: true },
    });
    expect(patch.json()).toMatchObject({ enabled: true, disabledReason: null, health: { failingSince: null } });
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 1, 10_000, 'the delivery after re-enabling');
  });

  it('a hanging endpoint does not delay a healthy one', async () => {
    const hanging = await receiver(() => ({ hang: true }));
    const healthy = await receiver();
    const slow = await register(host, { url: hanging.url });
    startSender({ WEBHOOK_TIMEOUT_MS: '15000', WEBHOOK_CONCURRENCY: '8', WEBHOOK_ENDPOINT_CONCURRENCY: '2' });
    for (let i = 0; i < 10; i++) await bookingEvent();
    await waitFor(async () => hanging.received.length === 2, 5_000, 'the hanging endpoint to hold its slots');
    const fine = await register(host, { url: healthy.url });
    await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/endpoints/${slow.id}`,
      headers: host.auth,
      payload: { description: 'still hanging' },
    });
    const sent = Date.now();
    await bookingEvent();
    await waitFor(async () => healthy.received.length === 1, 5_000, 'the healthy endpoint');
    // Timing is the behaviour: a sender that queued the healthy delivery behind the hanging ones would take 15 s.
    expect(healthy.received[0]!.at - sent).toBeLessThan(1000);
    expect(hanging.received).toHaveLength(2); // never more than WEBHOOK_ENDPOINT_CONCURRENCY in flight
    await waitFor(async () => (await deliveries(fine.id, 'succeeded')).length === 1, 10_000, 'the healthy delivery recorded');
  });

  it('signs with the old and the new secret during a rotation, then with the new one only', async () => {
    const r = await receiver();
    const endpoint = await register(host, { url: r.url });
    const rotated = (
      await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${endpoint.id}/rotate-secret`, headers: host.auth })
    ).json();
    startSender();
    await bookingEvent();
    await waitFor(async () => r.received.length === 1, 10_000, 'the first delivery');
    const first = r.received[0]!;
    expect(String(first.headers['webhook-signature']).split(' ')).toHaveLength(2);
    expect(() => new Webhook(endpoint.secret).verify(first.body, first.headers as Record<string, string>)).not.toThrow();
    expect(() => new Webhook(rotated.secret).verify(first.body, first.headers as Record<string, string>)).not.toThrow();

    // The overlap is over.
    await t.db.db.execute(
      sql`update webhook_endpoints
             set retired_secrets = jsonb_set(retired_secrets, '{0,expiresAt}', to_jsonb(now() - interval '1 second'))
           where public_id = ${endpoint.id}::uuid`,
    );
    await bookingEvent();
    await waitFor(async () => r.received.length === 2, 10_000, 'the second delivery');
    const second = r.received[1]!;
    expect(String(second.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(() => new Webhook(rotated.secret).verify(second.body, second.headers as Record<string, string>)).not.toThrow();
    expect(() => new Webhook(endpoint.secret).verify(second.body, second.headers as Record<string, string>)).toThrow();
  });

  it('sends a test event on request', async () => {
    const r = await receiver();
    const endpoint = await register(host, { url: r.url });
    startSender();
    const res = await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${endpoint.id}/test`, headers: host.auth });
    expect(res.statusCode, res.body).toBe(202);
    expect(res.json()).toMatchObject({ eventType: 'webhook.test', status: 'pending' });
    await waitFor(async () => r.received.length === 1, 10_000, 'the test event');
    const body = new Webhook(endpoint.secret).verify(r.received[0]!.body, r.received[0]!.headers as Record<string, string>) as Record<
      string,
      any
    >;
    expect(body).toMatchObject({ type: 'webhook.test', data: { endpointId: endpoint.id } });
    expect(r.received[0]!.headers['webhook-id']).toBe(res.json().id);
  });

  it('recovers failed deliveries since a time', async () => {
    let up = false;
    const r = await receiver(() => (up ? { status: 204 } : { status: 503 }));
    const endpoint = await register(host, { url: r.url });
    const since = new Date(Date.now() - 1000).toISOString();
    await bookingEvent();
    await bookingEvent();
    startSender();
    await waitFor(async () => (await deliveries(endpoint.id, 'failed')).length === 2, 10_000, 'two failed deliveries');
    up = true;
    const rec = await t.app.inject({
      method: 'POST',
      url: `/webhooks/endpoints/${endpoint.id}/recover`,
      headers: host.auth,
      payload: { since },
    });
    expect(rec.json()).toEqual({ requeued: 2, created: 0 });
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 2, 10_000, 'the recovered deliveries');
    const bad = await t.app.inject({
      method: 'POST',
      url: `/webhooks/endpoints/${endpoint.id}/recover`,
      headers: host.auth,
      payload: { since: 'yesterday' },
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().errors[0].path).toBe('body.since');
  });

  it('sends a delivery again with the same webhook-id when the worker holding it died', async () => {
    const r = await receiver();
    const endpoint = await register(host, { url: r.url });
    await bookingEvent();
    // A worker claims it and dies before sending or recording anything: the claim's lease is all that is left.
    const { rows } = await t.db.db.execute<{ public_id: string }>(sql`
      update webhook_deliveries d set claim_id = gen_random_uuid(), attempts = attempts + 1, next_attempt_at = now() + interval '1 hour'
        from webhook_endpoints e where e.id = d.endpoint_id and e.public_id = ${endpoint.id}::uuid returning d.public_id`);
    // Leased: nobody else sends it. runUntilIdle returns once a claim has found nothing to send and
    // nothing is in flight, so a sender that took the leased delivery would have sent it by then.
    const sender = kit.sender();
    await sender.runUntilIdle();
    expect(r.received).toHaveLength(0);
    await t.db.db.execute(sql`update webhook_deliveries set next_attempt_at = now() where public_id = ${rows[0]!.public_id}::uuid`); // the lease ends
    await sender.runUntilIdle();
    expect(r.received).toHaveLength(1);
    expect(r.received[0]!.headers['webhook-id']).toBe(rows[0]!.public_id);
    await waitFor(async () => (await deliveries(endpoint.id, 'succeeded')).length === 1, 10_000, 'the redelivery recorded');
  });

  it('deletes finished deliveries, their attempts and unreferenced events after WEBHOOK_RETENTION_DAYS, never a pending one', async () => {
    const r = await receiver(() => ({ status: 500 }));
    const endpoint = await register(host, { url: r.url });
    const old = await bookingEvent(); // will fail for good
    const owed = await bookingEvent(); // still pending
    const sender = startSender({ WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.1' });
    await waitFor(async () => (await deliveries(endpoint.id, 'failed')).length === 2, 10_000, 'two failed deliveries');
    await sender.stop(1000);
    await t.db.db.execute(sql`update webhook_deliveries d set status = 'pending', finished_at = null from webhook_events ev
                              where ev.id = d.event_id and ev.public_id = ${owed.eventId}::uuid`);
    // Forty days pass.
    await t.db.db.execute(sql`update webhook_events set occurred_at = occurred_at - interval '40 days'
                              where public_id in (${old.eventId}::uuid, ${owed.eventId}::uuid)`);
    await t.db.db
      .execute(sql`update webhook_deliveries set finished_at = finished_at - interval '40 days', created_at = created_at - interval '40 days'
                              where endpoint_id = (select id from webhook_endpoints where public_id = ${endpoint.id}::uuid)`);
    await t.db.db.execute(sql`update webhook_attempts set attempted_at = attempted_at - interval '40 days'`);

    const counts = await housekeepOnce(t.db.db, { retentionDays: 7, chores: appChores(senderConfig({ WEBHOOK_RETENTION_DAYS: '30' })) });
    expect(counts).toMatchObject({ webhookDeliveries: 1, webhookEvents: 1 });
    const left = await deliveries(endpoint.id);
    expect(left.map((d) => d.status)).toEqual(['pending']);
    expect(left[0]!.attempts.length).toBeGreaterThan(0); // a pending delivery keeps its history
    const { rows } = await t.db.db.execute<{ n: number }>(
      sql`select count(*)::int as n from webhook_events where public_id in (${old.eventId}::uuid, ${owed.eventId}::uuid)`,
    );
    expect(rows[0]!.n).toBe(1);
  });
});

afterAll(() => kit.closeAll());
