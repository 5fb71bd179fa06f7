import { beforeAll, describe, expect, it } from 'vitest';
import { tableCounts } from '../../helpers/db.ts';
import { daysFromNow, listProperty, signUp, type Session, useTestApp } from '../../helpers/app.ts';

const t = useTestApp({ DB_POOL_MAX: '20' });
let host: Session;
let guests: Session[];

beforeAll(async () => {
  host = await signUp(t.app, 'host');
  guests = await Promise.all(Array.from({ length: 10 }, () => signUp(t.app, 'guest')));
});

describe('concurrent bookings', () => {
  it('50 concurrent overlapping requests: exactly one 201, the rest 409, no 5xx, one outbox row', async () => {
    const p = await listProperty(t.app, host);
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        t.app.inject({
          method: 'POST',
          url: '/bookings',
          headers: guests[i % guests.length]!.auth,
          // All overlap the same core nights, with different edges.
          payload: { propertyId: p.id, checkIn: daysFromNow(10 + (i % 3)), checkOut: daysFromNow(15 + (i % 4)), guests: 1 },
        }),
      ),
    );
    const codes = responses.map((r) => r.statusCode);
    expect(codes.filter((c) => c === 201)).toHaveLength(1);
    expect(codes.filter((c) => c === 409)).toHaveLength(49);
    const { rows } = await t.db.pool.query(
      `select (select count(*)::int from bookings where property_id = pr.id) as bookings,
              (select count(*)::int from outbox o join bookings b on b.public_id::text = o.key
                where b.property_id = pr.id and o.topic = 'booking.created') as events
         from properties pr where pr.public_id = $1`,
      [p.id],
    );
    expect(rows[0]).toEqual({ bookings: 1, events: 1 });
  });

  it('non-overlapping concurrent requests on one property all succeed', async () => {
    const p = await listProperty(t.app, host);
    const responses = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        t.app.inject({
          method: 'POST',
          url: '/bookings',
          headers: guests[i % guests.length]!.auth,
          payload: { propertyId: p.id, checkIn: daysFromNow(100 + i * 2), checkOut: daysFromNow(102 + i * 2), guests: 1 },
        }),
      ),
    );
    expect(responses.map((r) => r.statusCode)).toEqual(Array(20).fill(201));
  });
});

describe('Idempotency-Key', () => {
  const body = (propertyId: string, offset: number) => ({
    propertyId,
    checkIn: daysFromNow(offset),
    checkOut: daysFromNow(offset + 2),
    guests: 2,
  });

  it('replays the first response for the same key and body, booking nothing new', async () => {
    const p = await listProperty(t.app, host);
    const g = guests[0]!;
    const headers = { ...g.auth, 'idempotency-key': 'replay-key-1' };
    const first = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 200) });
    expect(first.statusCode).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const before = await tableCounts(t.db);
    // Same body with its keys in another order is the same request.
    const { guests: n, ...rest } = body(p.id, 200);
    const second = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: { guests: n, ...rest } });
    expect(second.statusCode).toBe(201);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.json()).toEqual(first.json());
    expect(await tableCounts(t.db)).toEqual(before);
  });

  it('an expired key is taken afresh: a new request with it books, and the key then replays the new one', async () => {
    const p = await listProperty(t.app, host);
    const headers = { ...guests[7]!.auth, 'idempotency-key': 'expiring-key' };
    const first = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 300) });
    expect(first.statusCode).toBe(201);
    await t.db.pool.query(`update idempotency_keys set expires_at = now() - interval '1 second' where key = 'expiring-key'`);
    // Another body: refused while the key lived (422), a new request once it expired.
    const second = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 310) });
    expect(second.statusCode, second.body).toBe(201);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    expect(second.json().id).not.toBe(first.json().id);
    const third = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 310) });
    expect(third.headers['idempotent-replayed']).toBe('true');
    expect(third.json()).toEqual(second.json());
    const { rows } = await t.db.pool.query(
      `select count(*)::int as n, min(expires_at) > now() as live from idempotency_keys where key = 'expiring-key'`,
    );
    expect(rows[0]).toEqual({ n: 1, live: true });
  });

  it('refuses the same key with a different body (422 idempotency_key_reused)', async () => {
    const p = await listProperty(t.app, host);
    const headers = { ...guests[1]!.auth, 'idempotency-key': 'reused-key' };
    expect((await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 220) })).statusCode).toBe(201);
    const before = await tableCounts(t.db);
    const res = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 230) });
    expect(res.statusCode).toBe(422);
    expect(res.json().code).toBe('idempotency_key_reused');
    expect(await tableCounts(t.db)).toEqual(before);
  });

  it('keys are per user: another user may use the same key', async () => {
    const p = await listProperty(t.app, host);
    const a = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guests[2]!.auth, 'idempotency-key': 'shared' },
      payload: body(p.id, 240),
    });
    const b = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guests[3]!.auth, 'idempotency-key': 'shared' },
      payload: body(p.id, 250),
    });
    expect([a.statusCode, b.statusCode]).toEqual([201, 201]);
    expect(a.json().id).not.toBe(b.json().id);
  });

  it('concurrent requests with one key make one booking; the others replay it', async () => {
    const p = await listProperty(t.app, host);
    const headers = { ...guests[4]!.auth, 'idempotency-key': 'concurrent-key' };
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 260) })),
    );
    // The later requests wait on the key's row until the first commits, then replay its answer.
    expect(responses.map((r) => r.statusCode)).toEqual(Array(10).fill(201));
    expect(new Set(responses.map((r) => r.json().id)).size).toBe(1);
    expect(responses.filter((r) => r.headers['idempotent-replayed'] === 'true')).toHaveLength(9);
    const { rows } = await t.db.pool.query(
      `select count(*)::int n from bookings where property_id = (select id from properties where public_id = $1)`,
      [p.id],
    );
    expect(rows[0].n).toBe(1);
  });

  it('a failed request stores nothing, so the same key may be retried', async () => {
    const p = await listProperty(t.app, host, { maxGuests: 1 });
    const headers = { ...guests[5]!.auth, 'idempotency-key': 'after-failure' };
    const refused = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 270) });
    expect(refused.statusCode).toBe(422);
    const fixed = await t.app.inject({ method: 'PATCH', url: `/properties/${p.id}`, headers: host.auth, payload: { maxGuests: 4 } });
    expect(fixed.statusCode).toBe(200);
    const retried = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 270) });
    expect(retried.statusCode).toBe(201);
  });

  it("taken dates are the key's answer: its 409 is replayed even after a cancellation frees the dates", async () => {
    const p = await listProperty(t.app, host);
    const first = await t.app.inject({ method: 'POST', url: '/bookings', headers: guests[8]!.auth, payload: body(p.id, 290) });
    expect(first.statusCode).toBe(201);
    const headers = { ...guests[9]!.auth, 'idempotency-key': 'taken-dates' };
    const refused = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 290) });
    expect(refused.statusCode).toBe(409);
    expect(refused.json().code).toBe('dates_unavailable');
    const cancelled = await t.app.inject({ method: 'POST', url: `/bookings/${first.json().id}/cancel`, headers: guests[8]!.auth });
    expect(cancelled.statusCode).toBe(200);
    // The same request again (a resend, or the duplicate of a double-click that waited on the key):
    // the same answer, not a booking of the dates the cancellation freed.
    const again = await t.app.inject({ method: 'POST', url: '/bookings', headers, payload: body(p.id, 290) });
    expect(again.statusCode).toBe(409);
    expect(again.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json()).toEqual(refused.json());
    // A new request (a new key) may book them.
    const fresh = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guests[9]!.auth, 'idempotency-key': 'taken-dates-2' },
      payload: body(p.id, 290),
    });
    expect(fresh.statusCode).toBe(201);
    const { rows } = await t.db.pool.query(
      `select count(*) filter (where status = 'confirmed')::int confirmed, count(*)::int n from bookings where property_id = (select id from properties where public_id = $1)`,
      [p.id],
    );
    expect(rows[0]).toEqual({ confirmed: 1, n: 2 });
  });

  it('rejects a malformed key with 400', async () => {
    const p = await listProperty(t.app, host);
    const res = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guests[6]!.auth, 'idempotency-key': 'x'.repeat(300) },
      payload: body(p.id, 280),
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().errors[0].path).toBe('headers.idempotency-key');
  });
});
