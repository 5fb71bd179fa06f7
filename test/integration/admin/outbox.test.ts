import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HANDLER_CATALOGUE } from '../../../src/messages/catalogue.ts';
import { createUser } from '../../../src/users/auth.service.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, signUp, uniqueEmail, type Session, type TestApp } from '../../helpers/app.ts';

let db: TestDatabase;
let t: TestApp;
let admin: Session;
let guest: Session;

const PASSWORD = 'operator password 1';

async function signInAdmin(): Promise<Session> {
  const email = uniqueEmail('admin');
  await createUser(db.db, { email, password: PASSWORD, name: 'Ops', role: 'admin' });
  const res = await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: PASSWORD } });
  expect(res.statusCode, res.body).toBe(200);
  const body = res.json();
  return { token: body.token, user: body.user, auth: { authorization: `Bearer ${body.token}` } };
}

const payloadFor = (n: number) => ({ propertyId: '00000000-0000-4000-8000-' + String(n).padStart(12, '0') });

type SeedRow = {
  topic: string;
  status: 'PENDING' | 'DONE' | 'DEAD';
  ageSeconds?: number;
  processedAgoSeconds?: number;
  attempts?: number;
  lastError?: string;
  handlersDone?: string[];
  leased?: boolean;
};

/**
 * Seeds outbox rows directly: the admin side reads whatever the worker left, so the test writes
 * exactly those states. Returns the public ids in insertion order.
 */
async function seed(rows: SeedRow[]): Promise<string[]> {
  const ids: string[] = [];
  for (const [i, r] of rows.entries()) {
    const { rows: out } = await db.pool.query(
      `insert into outbox (topic, payload, status, attempts, created_at, available_at, processed_at, last_error,
                           handlers_done, claim_id, claimed_at, leased_until)
       values ($1, $2, $3, $4, now() - make_interval(secs => $5), now() - make_interval(secs => $5),
               case when $6::float8 is null then null else now() - make_interval(secs => $6::float8) end,
               $7, $8, case when $9 then gen_random_uuid() end, case when $9 then now() end,
               case when $9 then now() + interval '60 seconds' end)
       returning public_id`,
      [
        r.topic,
        payloadFor(i),
        r.status,
        r.attempts ?? 0,
        r.ageSeconds ?? 0,
        r.status === 'PENDING' ? null : (r.processedAgoSeconds ?? 0),
        r.lastError ?? null,
        r.handlersDone ?? [],
        r.leased ?? false,
      ],
    );
    ids.push(out[0].public_id);
  }
  return ids;
}

beforeAll(async () => {
  db = await createTestDatabase();
  t = await buildTestApp(db);
  admin = await signInAdmin();
  guest = await signUp(t.app, 'guest');
});
afterAll(async () => {
  await t.app.close();
  await db.drop();
});

const SOME_UUID = '5f1d7c0e-8a4b-4c1e-9d2f-3b6a7e8f9a0b';
const ADMIN_ROUTES = [
  { method: 'GET', url: '/admin/outbox/stats' },
  { method: 'GET', url: '/admin/outbox/depth' },
  { method: 'GET', url: '/admin/outbox/messages' },
  { method: 'GET', url: `/admin/outbox/messages/${SOME_UUID}` },
  { method: 'POST', url: `/admin/outbox/messages/${SOME_UUID}/retry` },
  { method: 'POST', url: '/admin/outbox/retry', payload: { topic: 'booking.created' } },
] as const;

describe('authorization', () => {
  it('covers every admin API route', () => {
    // A new /admin/outbox route must be added to ADMIN_ROUTES so the 401/403 checks below cover it.
    const registered = new Set<string>();
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const) {
      for (const r of ADMIN_ROUTES) {
        const path = r.url.replace(SOME_UUID, ':publicId');
        if (t.app.hasRoute({ method, url: path })) registered.add(`${method} ${path}`);
      }
    }
    expect([...registered].sort()).toEqual(ADMIN_ROUTES.map((r) => `${r.method} ${r.url.replace(SOME_UUID, ':publicId')}`).sort());
    const printed = t.app.printRoutes({ commonPrefix: false });
    const adminLines = printed.split('\n').filter((l) => /outbox/.test(l));
    expect(adminLines.length).toBeGreaterThan(0);
  });

  for (const route of ADMIN_ROUTES) {
    it(`${route.method} ${route.url}: 401 without a token or with a bad one, 403 for a guest`, async () => {
      const payload = 'payload' in route ? route.payload : undefined;
      const anon = await t.app.inject({ method: route.method, url: route.url, payload });
      expect(anon.statusCode).toBe(401);
      expect(anon.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(anon.json().code).toBe('unauthorized');

      const bad = await t.app.inject({
        method: route.method,
        url: route.url,
        payload,
        headers: { authorization: 'Bearer not-a-real-token-but-long-enough' },
      });
      expect(bad.statusCode).toBe(401);

      const asGuest = await t.app.inject({ method: route.method, url: route.url, payload, headers: guest.auth });
      expect(asGuest.statusCode).toBe(403);
      expect(asGuest.json().code).toBe('forbidden');
    });
  }

  it('a host is refused too', async () => {
    const host = await signUp(t.app, 'host');
    const res = await t.app.inject({ method: 'GET', url: '/admin/outbox/stats', headers: host.auth });
    expect(res.statusCode).toBe(403);
  });

  it('the dashboard page itself is public (it holds no data) and has no inline script', async () => {
    const page = await t.app.inject({ method: 'GET', url: '/admin' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.headers['content-security-policy']).toMatch(/script-src 'self'/);
    expect(page.body).toContain('<script src="/admin/dashboard.js"');
    expect(page.body).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/);
    const js = await t.app.inject({ method: 'GET', url: '/admin/dashboard.js' });
    expect(js.statusCode).toBe(200);
    expect(js.headers['content-type']).toMatch(/javascript/);
    const css = await t.app.inject({ method: 'GET', url: '/admin/dashboard.css' });
    expect(css.headers['content-type']).toMatch(/text\/css/);
    expect((await t.app.inject({ method: 'GET', url: '/admin/index.html' })).statusCode).toBe(404);
  });
});

describe('handler catalogue', () => {
  it("is read from the worker's own subscription list, not guessed", () => {
    const c = HANDLER_CATALOGUE;
    expect(c.handlersFor('booking.created')).toEqual(['email.guest-confirmation', 'email.host-new-booking', 'webhooks.booking-created']);
    expect(c.handlersFor('property.changed')).toEqual(['search.index-property']);
    expect(c.isHandled('listing.teleported')).toBe(false);
  });
});

describe('stats', () => {
  it('match the seeded rows, per topic and in total, and name topics nobody handles', async () => {
    await db.pool.query('delete from outbox');
    await seed([
      { topic: 'booking.created', status: 'PENDING', ageSeconds: 120 },
      { topic: 'booking.created', status: 'PENDING', ageSeconds: 30, leased: true, attempts: 1 },
      { topic: 'booking.created', status: 'DEAD', ageSeconds: 900, processedAgoSeconds: 300, attempts: 8, lastError: 'boom' },
      { topic: 'booking.created', status: 'DONE', ageSeconds: 600, processedAgoSeconds: 500 },
      { topic: 'booking.created', status: 'DONE', ageSeconds: 9000, processedAgoSeconds: 7200 }, // done two hours ago
      { topic: 'property.changed', status: 'DONE', ageSeconds: 60, processedAgoSeconds: 50 },
      { topic: 'property.changed', status: 'DEAD', ageSeconds: 60, processedAgoSeconds: 10, attempts: 1 },
      { topic: 'listing.teleported', status: 'PENDING', ageSeconds: 400 },
    ]);
    const res = await t.app.inject({ method: 'GET', url: '/admin/outbox/stats', headers: admin.auth });
    expect(res.statusCode, res.body).toBe(200);
    const s = res.json();
    expect(s).toMatchObject({ pending: 3, leased: 1, dead: 2, doneLastHour: 2, unknownTopics: ['listing.teleported'] });
    expect(s.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(400);
    expect(s.oldestPendingAgeSeconds).toBeLessThan(460);
    const byTopic = Object.fromEntries(s.byTopic.map((x: { topic: string }) => [x.topic, x]));
    expect(byTopic['booking.created']).toMatchObject({ handled: true, pending: 2, leased: 1, dead: 1, doneLastHour: 1 });
    expect(byTopic['booking.created'].oldestPendingAgeSeconds).toBeGreaterThanOrEqual(120);
    expect(byTopic['property.changed']).toMatchObject({
      handled: true,
      pending: 0,
      dead: 1,
      doneLastHour: 1,
      oldestPendingAgeSeconds: null,
    });
    expect(byTopic['listing.teleported']).toMatchObject({ handled: false, pending: 1 });
  });

  it('depth history reconstructs the last hour from the table', async () => {
    await db.pool.query('delete from outbox');
    await seed([
      // Created 50 min ago, done 20 min ago: pending between those two points only.
      { topic: 'booking.created', status: 'DONE', ageSeconds: 3000, processedAgoSeconds: 1200 },
      // Created 10 min ago, still pending.
      { topic: 'booking.created', status: 'PENDING', ageSeconds: 600 },
      // Created 40 min ago, dead 35 min ago.
      { topic: 'property.changed', status: 'DEAD', ageSeconds: 2400, processedAgoSeconds: 2100 },
    ]);
    const res = await t.app.inject({ method: 'GET', url: '/admin/outbox/depth?minutes=60', headers: admin.auth });
    expect(res.statusCode, res.body).toBe(200);
    const points: Array<{ at: string; pending: number; dead: number }> = res.json().points;
    expect(points.length).toBeGreaterThanOrEqual(61);
    const at = (minutesAgo: number) => {
      const target = Date.now() - minutesAgo * 60_000;
      return points.reduce((best, p) => (Math.abs(Date.parse(p.at) - target) < Math.abs(Date.parse(best.at) - target) ? p : best));
    };
    expect(at(55)).toMatchObject({ pending: 0, dead: 0 });
    expect(at(38)).toMatchObject({ pending: 2, dead: 0 });
    expect(at(30)).toMatchObject({ pending: 1, dead: 1 });
    expect(at(15)).toMatchObject({ pending: 0, dead: 1 });
    expect(at(0)).toMatchObject({ pending: 1, dead: 1 });
    const tooShort = await t.app.inject({ method: 'GET', url: '/admin/outbox/depth?minutes=1', headers: admin.auth });
    expect(tooShort.statusCode).toBe(400);
  });
});

describe('messages', () => {
  it('pages newest first with a keyset cursor, filtered by status and topic', async () => {
    await db.pool.query('delete from outbox');
    const ids = await seed(
      Array.from({ length: 7 }, (_, i) => ({
        topic: i % 2 ? 'property.changed' : 'booking.created',
        status: 'DEAD' as const,
        attempts: 8,
        lastError: `handler x: Error: failure ${i}`,
        processedAgoSeconds: 5,
      })),
    );
    await seed([{ topic: 'booking.created', status: 'PENDING' }]);

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const url: string = `/admin/outbox/messages?status=dead&limit=3${cursor ? `&cursor=${cursor}` : ''}`;
      const res = await t.app.inject({ method: 'GET', url, headers: admin.auth });
      expect(res.statusCode, res.body).toBe(200);
      const body = res.json();
      expect(body.items.length).toBeLessThanOrEqual(3);
      for (const m of body.items) {
        expect(m).toMatchObject({ status: 'DEAD', attempts: 8, leased: false });
        expect(Date.parse(m.availableAt)).not.toBeNaN();
        expect(m.lastError).toMatch(/^handler x: Error: failure/);
        expect(m).not.toHaveProperty('payload');
      }
      seen.push(...body.items.map((m: { id: string }) => m.id));
      cursor = body.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());

    const byTopic = await t.app.inject({
      method: 'GET',
      url: '/admin/outbox/messages?status=DEAD&topic=property.changed',
      headers: admin.auth,
    });
    expect(byTopic.json().items.map((m: { id: string }) => m.id)).toEqual([ids[5], ids[3], ids[1]]);

    const all = await t.app.inject({ method: 'GET', url: '/admin/outbox/messages', headers: admin.auth });
    expect(all.json().items).toHaveLength(8);
    expect(all.json().items[0].status).toBe('PENDING');
  });

  it('refuses bad filters with 400 problem details', async () => {
    const cursorOfNothing = Buffer.from(SOME_UUID).toString('base64url');
    for (const q of [
      'status=LOST',
      'limit=0',
      'limit=201',
      'limit=abc',
      'cursor=bm90LWEtdXVpZA',
      `cursor=${cursorOfNothing}`,
      'topic=%3Cscript%3E',
      'extra=1',
    ]) {
      const res = await t.app.inject({ method: 'GET', url: `/admin/outbox/messages?${q}`, headers: admin.auth });
      expect(res.statusCode, q).toBe(400);
      expect(res.headers['content-type']).toMatch(/application\/problem\+json/);
    }
    const notUuid = await t.app.inject({ method: 'GET', url: '/admin/outbox/messages/42', headers: admin.auth });
    expect(notUuid.statusCode).toBe(400);
    const missing = await t.app.inject({ method: 'GET', url: `/admin/outbox/messages/${SOME_UUID}`, headers: admin.auth });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('not_found');
  });

  it('one message comes with its payload, per-handler state and history', async () => {
    const [id] = await seed([
      {
        topic: 'booking.created',
        status: 'DEAD',
        attempts: 8,
        ageSeconds: 600,
        processedAgoSeconds: 60,
        lastError: 'email.host-new-booking: SmtpError: 554 rejected',
        handlersDone: ['email.guest-confirmation', 'email.renamed-since'],
      },
    ]);
    const res = await t.app.inject({ method: 'GET', url: `/admin/outbox/messages/${id}`, headers: admin.auth });
    expect(res.statusCode, res.body).toBe(200);
    const m = res.json();
    expect(m).toMatchObject({ id, topic: 'booking.created', status: 'DEAD', attempts: 8, topicHandled: true });
    expect(m.payload).toEqual(payloadFor(0));
    // The worker's registry names three handlers for booking.created; one finished before the message died.
    expect(m.handlers).toEqual([
      { name: 'email.guest-confirmation', state: 'done' },
      { name: 'email.host-new-booking', state: 'dead' },
      { name: 'webhooks.booking-created', state: 'dead' },
      { name: 'email.renamed-since', state: 'retired' },
    ]);
    expect(m.history.map((h: { event: string }) => h.event)).toEqual(['created', 'dead']);
    expect(m.history[1].detail).toBe('email.host-new-booking: SmtpError: 554 rejected');
  });

  it('a message a worker holds shows when its lease runs out', async () => {
    const [held, waiting] = await seed([
      { topic: 'booking.created', status: 'PENDING', ageSeconds: 30, leased: true, attempts: 1 },
      { topic: 'booking.created', status: 'PENDING', ageSeconds: 30 },
    ]);
    const get = async (id: string) =>
      (await t.app.inject({ method: 'GET', url: `/admin/outbox/messages/${id}`, headers: admin.auth })).json();
    const h = await get(held!);
    expect(h).toMatchObject({ status: 'PENDING', leased: true });
    // The seed's lease: 60 s from now (give or take the request's time).
    expect(Date.parse(h.leasedUntil) - Date.now()).toBeGreaterThan(50_000);
    expect(h.history.at(-1)).toEqual({ at: h.leasedUntil, event: 'available', detail: 'lease runs out (a worker holds it)' });
    const w = await get(waiting!);
    expect(w).toMatchObject({ leased: false, leasedUntil: null });
    expect(w.history.at(-1)).toEqual({ at: w.availableAt, event: 'available', detail: 'claimable' });
  });
});

describe('a lane message', () => {
  it("shows its handler and its original, and only that handler's state", async () => {
    const [origin] = await seed([{ topic: 'booking.created', status: 'DONE', handlersDone: ['email.guest-confirmation'] }]);
    const { rows } = await db.pool.query(
      `insert into outbox (topic, key, payload, lane, origin_id, status, attempts, processed_at, last_error)
       values ('booking.created', 'events.relay@b-1', '{}', 'events.relay', $1, 'DEAD', 8, now(), 'events.relay: Error: NATS away')
       returning public_id`,
      [origin],
    );
    const res = await t.app.inject({ method: 'GET', url: `/admin/outbox/messages/${rows[0].public_id}`, headers: admin.auth });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({
      lane: 'events.relay',
      originId: origin,
      key: 'events.relay@b-1',
      handlers: [{ name: 'events.relay', state: 'dead' }],
    });
    const original = await t.app.inject({ method: 'GET', url: `/admin/outbox/messages/${origin}`, headers: admin.auth });
    expect(original.json()).toMatchObject({ lane: null, originId: null });
  });
});

describe('retry', () => {
  it('puts one dead letter back to PENDING with attempts reset, and records who did it', async () => {
    const [id] = await seed([
      { topic: 'booking.created', status: 'DEAD', attempts: 8, processedAgoSeconds: 30, lastError: 'x', handlersDone: ['a'] },
    ]);
    const res = await t.app.inject({ method: 'POST', url: `/admin/outbox/messages/${id}/retry`, headers: admin.auth });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ affected: 1, messageIds: [id] });

    const { rows } = await db.pool.query(
      `select status, attempts, processed_at, available_at <= now() as due, handlers_done from outbox where public_id = $1`,
      [id],
    );
    expect(rows[0]).toMatchObject({ status: 'PENDING', attempts: 0, processed_at: null, due: true, handlers_done: ['a'] });

    const { rows: audit } = await db.pool.query(
      `select a.actor, a.action, a.affected, a.message_ids, a.criteria, u.public_id as user_public_id
         from outbox_audit a join users u on u.id = a.actor_user_id
        where $1::uuid = any(a.message_ids)`,
      [id],
    );
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ action: 'requeue', affected: 1, message_ids: [id], criteria: { ids: [id] } });
    expect(audit[0].user_public_id).toBe(admin.user.id);
    expect(audit[0].actor).toContain(admin.user.email);

    // The message's history now shows the replay.
    const detail = await t.app.inject({ method: 'GET', url: `/admin/outbox/messages/${id}`, headers: admin.auth });
    expect(detail.json().history.map((h: { event: string }) => h.event)).toContain('requeued');

    // A second retry finds nothing dead: 409, and no second audit row.
    const again = await t.app.inject({ method: 'POST', url: `/admin/outbox/messages/${id}/retry`, headers: admin.auth });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('conflict');
    const { rows: after } = await db.pool.query(`select count(*)::int as n from outbox_audit where $1::uuid = any(message_ids)`, [id]);
    expect(after[0].n).toBe(1);
  });

  it('refuses to replay a DONE message (it would repeat its effects) and 404s an unknown one', async () => {
    const [done] = await seed([{ topic: 'booking.created', status: 'DONE', processedAgoSeconds: 5 }]);
    const res = await t.app.inject({ method: 'POST', url: `/admin/outbox/messages/${done}/retry`, headers: admin.auth });
    expect(res.statusCode).toBe(409);
    const { rows } = await db.pool.query(`select status from outbox where public_id = $1`, [done]);
    expect(rows[0].status).toBe('DONE');
    const unknown = await t.app.inject({ method: 'POST', url: `/admin/outbox/messages/${SOME_UUID}/retry`, headers: admin.auth });
    expect(unknown.statusCode).toBe(404);
  });

  it('bulk: by ids (skipping ones that are not DEAD) and by topic, one audit row each', async () => {
    await db.pool.query('delete from outbox');
    const [d1, d2, pending, d3, d4] = await seed([
      { topic: 'booking.created', status: 'DEAD', attempts: 8, processedAgoSeconds: 1 },
      { topic: 'booking.created', status: 'DEAD', attempts: 8, processedAgoSeconds: 1 },
      { topic: 'booking.created', status: 'PENDING' },
      { topic: 'property.changed', status: 'DEAD', attempts: 3, processedAgoSeconds: 1 },
      { topic: 'property.changed', status: 'DEAD', attempts: 3, processedAgoSeconds: 1 },
    ]);
    const byIds = await t.app.inject({
      method: 'POST',
      url: '/admin/outbox/retry',
      headers: admin.auth,
      payload: { ids: [d1, d2, pending] },
    });
    expect(byIds.statusCode, byIds.body).toBe(200);
    expect(byIds.json().affected).toBe(2);
    expect(new Set(byIds.json().messageIds)).toEqual(new Set([d1, d2]));

    const byTopic = await t.app.inject({
      method: 'POST',
      url: '/admin/outbox/retry',
      headers: admin.auth,
      payload: { topic: 'property.changed' },
    });
    expect(byTopic.statusCode, byTopic.body).toBe(200);
    expect(byTopic.json().affected).toBe(2);
    expect(new Set(byTopic.json().messageIds)).toEqual(new Set([d3, d4]));

    const { rows } = await db.pool.query(`select count(*)::int as n from outbox where status = 'DEAD'`);
    expect(rows[0].n).toBe(0);
    const { rows: audit } = await db.pool.query(
      `select criteria, affected from outbox_audit where actor_user_id is not null order by id desc limit 2`,
    );
    expect(audit).toEqual([
      { criteria: { topic: 'property.changed' }, affected: 2 },
      { criteria: { ids: [d1, d2, pending] }, affected: 2 },
    ]);
  });

  it('bulk: 400 unless exactly one of topic or ids is given, well-formed', async () => {
    const { rows: before } = await db.pool.query(`select count(*)::int as n from outbox_audit`);
    const bodies: unknown[] = [
      {},
      { topic: 'booking.created', ids: [SOME_UUID] },
      { ids: [] },
      { ids: ['not-a-uuid'] },
      { ids: Array.from({ length: 501 }, () => SOME_UUID) },
      { topic: '' },
      { all: true },
      [SOME_UUID],
    ];
    for (const payload of bodies) {
      const res = await t.app.inject({ method: 'POST', url: '/admin/outbox/retry', headers: admin.auth, payload: payload as object });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().code).toMatch(/validation_failed|bad_request/);
    }
    const { rows: after } = await db.pool.query(`select count(*)::int as n from outbox_audit`);
    expect(after[0].n).toBe(before[0].n);
  });
});
