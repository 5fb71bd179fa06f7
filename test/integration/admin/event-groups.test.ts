import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '../../../src/events/connection.ts';
import { recordDeadLetter } from '../../../src/events/dead-letters.ts';
import { fromParts } from '../../../src/events/event.ts';
import { EventsUnavailableError } from '../../../src/events/errors.ts';
import { createEventsMonitor } from '../../../src/events/monitor.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { createUser } from '../../../src/users/auth.service.ts';
import { buildTestApp, signUp, uniqueEmail, type Session, type TestApp } from '../../helpers/app.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { seedEventGroups } from '../../helpers/event-groups.ts';
import { skipWithoutNats, startNats, type NatsServer } from '../../helpers/nats.ts';

/*
 * GET /admin/events/groups: the events stream's consumer groups for the dashboard. Without
 * NATS_URL, and with a NATS that refuses or never answers, no nats-server is needed; the rest runs
 * against a real one (test/helpers/nats.ts: skipped without the binary, failed under CI=1 or CI=true).
 */

const skip = skipWithoutNats();
const PASSWORD = 'operator password 1';
const URL_ = '/admin/events/groups';
let db: TestDatabase;
let plain: TestApp;
let admin: Session;
let guest: Session;
const apps: TestApp[] = [];

async function app(env: Record<string, string>): Promise<TestApp> {
  const built = await buildTestApp(db, env);
  apps.push(built);
  return built;
}

beforeAll(async () => {
  db = await createTestDatabase('evgroups');
  plain = await app({});
  const email = uniqueEmail('admin');
  await createUser(db.db, { email, password: PASSWORD, name: 'Ops', role: 'admin' });
  const res = await plain.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: PASSWORD } });
  expect(res.statusCode, res.body).toBe(200);
  admin = { token: res.json().token, user: res.json().user, auth: { authorization: `Bearer ${res.json().token}` } };
  guest = await signUp(plain.app, 'guest');
});
afterAll(async () => {
  for (const a of apps) await a.app.close();
  await db?.drop();
});

const get = (t: TestApp, auth?: Session) => t.app.inject({ method: 'GET', url: URL_, headers: auth ? auth.auth : {} });

/** A 503 problem document from the app's error handler, answered within `withinMs`. */
async function expectUnavailable(t: TestApp, withinMs: number) {
  const started = Date.now();
  const res = await get(t, admin);
  const took = Date.now() - started;
  expect(res.statusCode, res.body).toBe(503);
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(res.json()).toMatchObject({ code: 'service_unavailable', status: 503, instance: URL_ });
  expect(res.json().detail).toMatch(/^The events log is unavailable: NATS at 127\.0\.0\.1:\d+/);
  expect(took).toBeLessThan(withinMs);
  return res.json().detail as string;
}

describe('GET /admin/events/groups without a reachable NATS', () => {
  it('says the events relay is not configured when NATS_URL is not set', async () => {
    const res = await get(plain, admin);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ configured: false, stream: null, groups: [] });
  });

  it('is for admins only: 401 without a token, 403 for a guest', async () => {
    expect((await get(plain)).statusCode).toBe(401);
    const res = await get(plain, guest);
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('forbidden');
  });

  it('answers 503 at once when nothing listens on the NATS port, and again on the next request', async () => {
    const t = await app({ NATS_URL: `nats://ops:s3cret-pw@127.0.0.1:${await freePort()}`, EVENTS_ADMIN_TIMEOUT_MS: '2000' });
    const detail = await expectUnavailable(t, 3000);
    expect(detail).toMatch(/connection refused/);
    await expectUnavailable(t, 3000);
    // Logged as an outage (error, with the reason); the URL's credentials appear nowhere.
    const failures = t.logs.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request failed');
    expect(failures).toHaveLength(2);
    // pino appends the causes: ours, then the client's, down to the socket's.
    expect(failures[0].err.message).toContain(detail);
    expect(failures[0].err.message).toMatch(/ECONNREFUSED/);
    expect(t.logs.text).not.toContain('s3cret-pw');
    expect(detail).not.toContain('s3cret-pw');
  });

  it('answers 503 after EVENTS_ADMIN_TIMEOUT_MS when NATS accepts the connection and never answers', async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((s) => void sockets.add(s));
    const port = await freePort();
    await new Promise<void>((r) => silent.listen(port, '127.0.0.1', r));
    try {
      const t = await app({ NATS_URL: `nats://127.0.0.1:${port}`, EVENTS_ADMIN_TIMEOUT_MS: '500' });
      const started = Date.now();
      expect(await expectUnavailable(t, 2500)).toMatch(/did not answer within 500 ms/);
      expect(Date.now() - started).toBeGreaterThanOrEqual(450);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => silent.close(r));
    }
  });
});

describe.skipIf(skip)('GET /admin/events/groups with a nats-server', () => {
  let nats: NatsServer;
  let t: TestApp;
  beforeAll(async () => {
    nats = await startNats();
    t = await app({ NATS_URL: nats.url, EVENTS_STREAM: 'GRP', EVENTS_SUBJECT_PREFIX: 'grp', EVENTS_ADMIN_TIMEOUT_MS: '1000' });
    await seedEventGroups(nats.url, t.config);
  });
  afterAll(async () => {
    await nats?.destroy();
  });

  const event = (messageId: string) =>
    fromParts({ subject: 'grp.booking.created', headers: { 'Nats-Msg-Id': messageId }, data: '{}', streamSeq: 1, deliveries: 5 });

  it('says so when the stream has not been created yet (the worker creates it)', async () => {
    const other = await app({ NATS_URL: nats.url, EVENTS_STREAM: 'NOT_YET', EVENTS_SUBJECT_PREFIX: 'notyet' });
    const res = await get(other, admin);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ configured: true, stream: { name: 'NOT_YET', exists: false, messages: 0 }, groups: [] });
  });

  it('lists every group with its pending and ack-pending counts, oldest unacked age and open dead letters', async () => {
    // Dead letters: two open for `all`, one replayed for `bookings` (not open), one of a group
    // that is not on the stream.
    await recordDeadLetter(db.db, 'all', event('dl-1'), 'boom');
    await recordDeadLetter(db.db, 'all', event('dl-2'), 'boom');
    await recordDeadLetter(db.db, 'bookings', event('dl-3'), 'boom');
    await db.pool.query(`update consumer_dead_letters set replayed_at = now() where consumer_group = 'bookings'`);
    await recordDeadLetter(db.db, 'elsewhere', event('dl-4'), 'boom');

    const res = await get(t, admin);
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body.configured).toBe(true);
    expect(body.stream).toEqual({ name: 'GRP', exists: true, messages: 5, firstSeq: 1, firstAt: expect.any(String) });
    expect(body.groups.map((g: { name: string }) => g.name)).toEqual(['all', 'bookings', 'props']);
    const [all, bookings, props] = body.groups;
    expect(all).toMatchObject({ pending: 3, ackPending: 2, openDeadLetters: 2 });
    expect(bookings).toMatchObject({ pending: 3, ackPending: 0, openDeadLetters: 0 });
    expect(props).toEqual({
      name: 'props',
      pending: 0,
      ackPending: 0,
      oldestUnackedAgeSeconds: 0,
      openDeadLetters: 0,
      eventsAgedOut: false,
    });
    for (const g of body.groups) expect(g.eventsAgedOut).toBe(false);
    // Published more than a second before (seedEventGroups waits), and not minutes ago.
    for (const g of [all, bookings]) {
      expect(g.oldestUnackedAgeSeconds).toBeGreaterThanOrEqual(1);
      expect(g.oldestUnackedAgeSeconds).toBeLessThan(60);
    }
  });

  it('flags a group whose next event aged out of the stream before it read it, and says where the stream starts now', async () => {
    const aged = await app({ NATS_URL: nats.url, EVENTS_STREAM: 'AGED', EVENTS_SUBJECT_PREFIX: 'aged', EVENTS_ADMIN_TIMEOUT_MS: '1000' });
    // The same three groups (`props` caught up, `all` and `bookings` behind), then the stream's
    // first four events gone, as max age removes them: `all` and `bookings` had not read them.
    await seedEventGroups(nats.url, aged.config, 0);
    const nc = await connectNats(nats.url, 'test-aged');
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.purge('AGED', { seq: 5 });
    } finally {
      await nc.close();
    }
    const res = await get(aged, admin);
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body.stream).toMatchObject({ name: 'AGED', exists: true, messages: 1, firstSeq: 5 });
    expect(Date.parse(body.stream.firstAt)).toBeGreaterThan(Date.now() - 60_000);
    expect(Object.fromEntries(body.groups.map((g: { name: string; eventsAgedOut: boolean }) => [g.name, g.eventsAgedOut]))).toEqual({
      all: true,
      bookings: true,
      props: false,
    });
  });

  it('is for admins only with NATS configured too', async () => {
    expect((await get(t, guest)).statusCode).toBe(403);
    expect((await get(t)).statusCode).toBe(401);
  });

  it('connects once, on first use, shares the connection between reads and closes it', async () => {
    const made: NatsConnection[] = [];
    const monitor = createEventsMonitor({
      url: nats.url,
      stream: 'GRP',
      timeoutMs: 1000,
      connect: async (url, name) => {
        const nc = await connectNats(url, name);
        made.push(nc);
        return nc;
      },
    });
    expect(made).toHaveLength(0);
    const reads = await Promise.all([monitor.read(), monitor.read(), monitor.read()]);
    await monitor.read();
    expect(made).toHaveLength(1);
    expect(reads.map((r) => r.groups.length)).toEqual([3, 3, 3]);
    await monitor.close();
    expect(made[0]!.isClosed()).toBe(true);
    await expect(monitor.read()).rejects.toBeInstanceOf(EventsUnavailableError);
  });

  it('answers 503 within the timeout while NATS is down, and the figures again once it is back', async () => {
    expect((await get(t, admin)).statusCode).toBe(200); // connected before the outage
    await nats.stop();
    let down = true;
    try {
      await expectUnavailable(t, 3000);
      // A monitor whose first connection fails tries again on its next read.
      const monitor = createEventsMonitor({ url: nats.url, stream: 'GRP', timeoutMs: 1000 });
      try {
        await expect(monitor.read()).rejects.toBeInstanceOf(EventsUnavailableError);
        await nats.start();
        down = false;
        expect((await monitor.read()).stream).toMatchObject({ name: 'GRP', exists: true, messages: 5, firstSeq: 1 });
      } finally {
        await monitor.close();
      }
    } finally {
      if (down) await nats.start();
    }
    // The app's connection reconnects by itself (every half second).
    await expect.poll(async () => (await get(t, admin)).statusCode, { timeout: 10_000, interval: 250 }).toBe(200);
    expect((await get(t, admin)).json().groups.map((g: { name: string }) => g.name)).toEqual(['all', 'bookings', 'props']);
  }, 30_000);
});
