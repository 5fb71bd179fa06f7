import { beforeAll, describe, expect, it } from 'vitest';
import { tableCounts } from '../../helpers/db.ts';
import { daysFromNow, listProperty, signUp, type Session, useTestApp } from '../../helpers/app.ts';

const t = useTestApp();
let host: Session;
let guest: Session;
let otherGuest: Session;

beforeAll(async () => {
  [host, guest, otherGuest] = await Promise.all([signUp(t.app, 'host'), signUp(t.app, 'guest'), signUp(t.app, 'guest')]);
});

const book = (who: Session, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  t.app.inject({ method: 'POST', url: '/bookings', headers: { ...who.auth, ...headers }, payload: body });

const outboxRows = async (propertyKeyOrBooking?: string) =>
  (
    await t.db.pool.query(`select topic, key, payload, status from outbox where $1::text is null or key = $1 order by id`, [
      propertyKeyOrBooking ?? null,
    ])
  ).rows;

describe('POST /bookings', () => {
  it('stores the price as charged: a later price change does not change the booking', async () => {
    const p = await listProperty(t.app, host, { nightlyPrice: 9_999, cleaningFee: 1_001 });
    const res = await book(guest, { propertyId: p.id, checkIn: daysFromNow(20), checkOut: daysFromNow(22), guests: 1 });
    expect(res.statusCode).toBe(201);
    const booking = res.json();
    expect(booking.price).toEqual({
      currency: 'EUR',
      nights: 2,
      nightlyPrice: 9_999,
      subtotal: 19_998,
      cleaningFee: 1_001,
      serviceFee: Math.round((19_998 + 1_001) * 0.12),
      total: 19_998 + 1_001 + 2_520,
    });
    const patch = await t.app.inject({
      method: 'PATCH',
      url: `/properties/${p.id}`,
      headers: host.auth,
      payload: { nightlyPrice: 50_000 },
    });
    expect(patch.statusCode).toBe(200);
    const again = await t.app.inject({ method: 'GET', url: `/bookings/${booking.id}`, headers: guest.auth });
    expect(again.json().price).toEqual(booking.price);
  });

  it('writes booking.created with the snapshot payload in the same transaction', async () => {
    const p = await listProperty(t.app, host, { title: 'Cabin by the lake' });
    const res = await book(guest, { propertyId: p.id, checkIn: daysFromNow(30), checkOut: daysFromNow(33), guests: 2 });
    const b = res.json();
    const rows = await outboxRows(b.id);
    expect(rows).toHaveLength(1);
    expect(rows[0].topic).toBe('booking.created');
    expect(rows[0].status).toBe('PENDING');
    expect(rows[0].payload).toEqual({
      bookingId: b.id,
      propertyId: p.id,
      propertyTitle: 'Cabin by the lake',
      guestEmail: guest.user.email,
      guestName: guest.user.name,
      hostEmail: host.user.email,
      hostName: host.user.name,
      checkIn: b.checkIn,
      checkOut: b.checkOut,
      guests: 2,
      nights: 3,
      total: b.price.total,
      currency: 'EUR',
      idempotencyKey: `booking-created:${b.id}`,
    });
  });

  it('refuses an overlapping stay with 409 and rolls its outbox row back with it', async () => {
    const p = await listProperty(t.app, host);
    const first = await book(guest, { propertyId: p.id, checkIn: daysFromNow(40), checkOut: daysFromNow(45), guests: 1 });
    expect(first.statusCode).toBe(201);
    const before = await tableCounts(t.db);
    for (const [from, to] of [
      [40, 45],
      [39, 41],
      [44, 50],
      [41, 43],
      [30, 60],
    ] as const) {
      const res = await book(otherGuest, { propertyId: p.id, checkIn: daysFromNow(from), checkOut: daysFromNow(to), guests: 1 });
      expect(res.statusCode, `${from}-${to}`).toBe(409);
      expect(res.json().code).toBe('dates_unavailable');
      expect(res.headers['content-type']).toContain('application/problem+json');
    }
    expect(await tableCounts(t.db)).toEqual(before);
    const created = (
      await t.db.pool.query(
        `select count(*)::int n from outbox o join bookings b on b.public_id::text = o.key
        where o.topic = 'booking.created' and b.property_id = (select id from properties where public_id = $1)`,
        [p.id],
      )
    ).rows[0].n;
    expect(created).toBe(1);
  });

  it('allows back-to-back stays, and a cancelled booking frees its dates', async () => {
    const p = await listProperty(t.app, host);
    const a = await book(guest, { propertyId: p.id, checkIn: daysFromNow(50), checkOut: daysFromNow(53), guests: 1 });
    const b = await book(otherGuest, { propertyId: p.id, checkIn: daysFromNow(53), checkOut: daysFromNow(55), guests: 1 });
    const c = await book(otherGuest, { propertyId: p.id, checkIn: daysFromNow(48), checkOut: daysFromNow(50), guests: 1 });
    expect([a.statusCode, b.statusCode, c.statusCode]).toEqual([201, 201, 201]);
    const clash = await book(otherGuest, { propertyId: p.id, checkIn: daysFromNow(51), checkOut: daysFromNow(52), guests: 1 });
    expect(clash.statusCode).toBe(409);
    const cancel = await t.app.inject({ method: 'POST', url: `/bookings/${a.json().id}/cancel`, headers: guest.auth });
    expect(cancel.statusCode).toBe(200);
    expect(cancel.json().status).toBe('cancelled');
    const retry = await book(otherGuest, { propertyId: p.id, checkIn: daysFromNow(51), checkOut: daysFromNow(52), guests: 1 });
    expect(retry.statusCode).toBe(201);
  });

  it.each([
    ['check_in_in_past', { checkIn: daysFromNow(-1), checkOut: daysFromNow(2) }, {}],
    ['too_many_guests', { guests: 5 }, {}],
    ['stay_too_long', { checkIn: daysFromNow(100), checkOut: daysFromNow(191) }, {}],
    ['property_inactive', {}, { active: false }],
  ])('answers 422 %s and writes nothing', async (code, bodyOverride, propertyOverride) => {
    const p = await listProperty(t.app, host, { maxGuests: 4, ...propertyOverride });
    const before = await tableCounts(t.db);
    const res = await book(guest, { propertyId: p.id, checkIn: daysFromNow(60), checkOut: daysFromNow(62), guests: 2, ...bodyOverride });
    expect(res.statusCode, res.body).toBe(422);
    expect(res.json().code).toBe(code);
    expect(await tableCounts(t.db)).toEqual(before);
  });

  it('accepts exactly 90 nights and checking in today', async () => {
    const p = await listProperty(t.app, host);
    expect((await book(guest, { propertyId: p.id, checkIn: daysFromNow(0), checkOut: daysFromNow(90), guests: 1 })).statusCode).toBe(201);
  });

  it('answers 404 for an unknown property', async () => {
    const res = await book(guest, {
      propertyId: '00000000-0000-4000-8000-000000000000',
      checkIn: daysFromNow(5),
      checkOut: daysFromNow(6),
      guests: 1,
    });
    expect(res.statusCode).toBe(404);
  });
});

describe('cancel', () => {
  it('is idempotent: cancelling twice answers 200 and writes one booking.cancelled', async () => {
    const p = await listProperty(t.app, host);
    const b = (await book(guest, { propertyId: p.id, checkIn: daysFromNow(70), checkOut: daysFromNow(72), guests: 1 })).json();
    const first = await t.app.inject({ method: 'POST', url: `/bookings/${b.id}/cancel`, headers: host.auth });
    const second = await t.app.inject({ method: 'POST', url: `/bookings/${b.id}/cancel`, headers: guest.auth });
    expect([first.statusCode, second.statusCode]).toEqual([200, 200]);
    expect(second.json()).toEqual(first.json());
    const rows = await outboxRows(b.id);
    expect(rows.map((r) => r.topic)).toEqual(['booking.created', 'booking.cancelled']);
    expect(rows[1].payload.cancelledBy).toBe('host');
    expect(rows[1].payload.idempotencyKey).toBe(`booking-cancelled:${b.id}`);
  });
});

describe('cancel, and its event', () => {
  it("writes booking.cancelled in the cancellation's own transaction: one commits with the other, or neither does", async () => {
    const p = await listProperty(t.app, host);
    const b = (await book(guest, { propertyId: p.id, checkIn: daysFromNow(80), checkOut: daysFromNow(82), guests: 1 })).json();
    const cancel = () => t.app.inject({ method: 'POST', url: `/bookings/${b.id}/cancel`, headers: guest.auth });
    const status = async () => (await t.app.inject({ method: 'GET', url: `/bookings/${b.id}`, headers: guest.auth })).json().status;

    // The event's write fails (as it would on a full disk or a lost connection): the cancellation
    // must not stay behind without its event, or the guest and host are never told.
    await t.db.pool.query(`
      create function refuse_this_cancellation() returns trigger language plpgsql as $$
      begin
        if new.topic = 'booking.cancelled' and new.key = '${b.id}' then raise exception 'the outbox refuses this write'; end if;
        return new;
      end $$;
      create trigger refuse_this_cancellation before insert on outbox for each row execute function refuse_this_cancellation();`);
    try {
      expect((await cancel()).statusCode).toBe(500);
    } finally {
      await t.db.pool.query('drop trigger refuse_this_cancellation on outbox; drop function refuse_this_cancellation()');
    }
    expect(await status()).toBe('confirmed');
    expect((await outboxRows(b.id)).map((r) => r.topic)).toEqual(['booking.created']);

    // It succeeds: the booking's new row version and the event were written by one transaction.
    expect((await cancel()).statusCode).toBe(200);
    expect(await status()).toBe('cancelled');
    const { rows } = await t.db.pool.query<{ booking: string; event: string }>(
      `select (select xmin::text from bookings where public_id = $1) as booking,
              (select xmin::text from outbox where key = $1::text and topic = 'booking.cancelled') as event`,
      [b.id],
    );
    expect(rows[0]!.event).toBe(rows[0]!.booking);
  });
});

describe('GET /bookings', () => {
  it('pages a guest’s own bookings newest first, each exactly once', async () => {
    const g = await signUp(t.app, 'guest');
    const p = await listProperty(t.app, host);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const res = await book(g, { propertyId: p.id, checkIn: daysFromNow(100 + i * 2), checkOut: daysFromNow(101 + i * 2), guests: 1 });
      ids.push(res.json().id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: { statusCode: number; json(): { items: { id: string }[]; nextCursor: string | null } } = await t.app.inject({
        method: 'GET',
        url: `/bookings?limit=3${cursor ? `&cursor=${cursor}` : ''}`,
        headers: g.auth,
      });
      expect(res.statusCode).toBe(200);
      const page = res.json();
      seen.push(...page.items.map((b) => b.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual([...ids].reverse());
  });

  it('shows a host the bookings of their properties only', async () => {
    const h2 = await signUp(t.app, 'host');
    const p2 = await listProperty(t.app, h2);
    const b = (await book(guest, { propertyId: p2.id, checkIn: daysFromNow(200), checkOut: daysFromNow(201), guests: 1 })).json();
    const list = (await t.app.inject({ method: 'GET', url: '/bookings?limit=100', headers: h2.auth })).json();
    expect(list.items.map((x: { id: string }) => x.id)).toEqual([b.id]);
  });

  it('rejects a forged cursor with 400', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/bookings?cursor=not-a-cursor', headers: guest.auth });
    expect(res.statusCode).toBe(400);
  });
});

describe('availability', () => {
  it('lists booked ranges without guest data', async () => {
    const p = await listProperty(t.app, host);
    await book(guest, { propertyId: p.id, checkIn: daysFromNow(10), checkOut: daysFromNow(12), guests: 1 });
    const res = await t.app.inject({ method: 'GET', url: `/properties/${p.id}/availability?from=${daysFromNow(0)}&to=${daysFromNow(30)}` });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      propertyId: p.id,
      from: daysFromNow(0),
      to: daysFromNow(30),
      booked: [{ checkIn: daysFromNow(10), checkOut: daysFromNow(12) }],
    });
    const tooLong = await t.app.inject({
      method: 'GET',
      url: `/properties/${p.id}/availability?from=${daysFromNow(0)}&to=${daysFromNow(400)}`,
    });
    expect(tooLong.statusCode).toBe(400);
  });
});

describe('GET /health', () => {
  it('reports the database and the outbox numbers', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.status).toBe('ok');
    expect(body.db).toBe('up');
    const { rows } = await t.db.pool.query(`select count(*)::int n from outbox where status = 'PENDING'`);
    expect(body.outbox.pending).toBe(rows[0].n);
    expect(body.outbox.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(0);
  });
});
