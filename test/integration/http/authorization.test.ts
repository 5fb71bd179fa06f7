import { beforeAll, describe, expect, it } from 'vitest';
import { daysFromNow, listProperty, propertyInput, signUp, type Session, useTestApp } from '../../helpers/app.ts';

/*
 * Every route × {anonymous, guest, other guest, host, other host}. "guest" holds booking B on
 * property P of "host"; the others are strangers to both. 404 (not 403) where merely learning
 * that a booking exists would be a leak.
 */

type Actor = 'anonymous' | 'guest' | 'otherGuest' | 'host' | 'otherHost';
const ACTORS: Actor[] = ['anonymous', 'guest', 'otherGuest', 'host', 'otherHost'];

const t = useTestApp();
let sessions: Record<Exclude<Actor, 'anonymous'>, Session>;
let propertyId: string;
let bookingId: string;

beforeAll(async () => {
  const [guest, otherGuest, host, otherHost] = await Promise.all([
    signUp(t.app, 'guest'),
    signUp(t.app, 'guest'),
    signUp(t.app, 'host'),
    signUp(t.app, 'host'),
  ]);
  sessions = { guest, otherGuest, host, otherHost };
  propertyId = (await listProperty(t.app, host)).id;
  const b = await t.app.inject({
    method: 'POST',
    url: '/bookings',
    headers: guest.auth,
    payload: { propertyId, checkIn: daysFromNow(5), checkOut: daysFromNow(7), guests: 1 },
  });
  bookingId = b.json().id;
});

const headersOf = (a: Actor) => (a === 'anonymous' ? {} : sessions[a].auth);

interface Case {
  name: string;
  request: (a: Actor, i: number) => { method: 'GET' | 'POST' | 'PATCH'; url: string; payload?: object };
  expected: Record<Actor, number>;
}

const cases: Case[] = [
  {
    name: 'GET /me',
    request: () => ({ method: 'GET', url: '/me' }),
    expected: { anonymous: 401, guest: 200, otherGuest: 200, host: 200, otherHost: 200 },
  },
  {
    name: 'POST /properties',
    request: () => ({ method: 'POST', url: '/properties', payload: propertyInput() }),
    expected: { anonymous: 401, guest: 403, otherGuest: 403, host: 201, otherHost: 201 },
  },
  {
    name: 'PATCH /properties/:id',
    request: () => ({ method: 'PATCH', url: `/properties/${propertyId}`, payload: { title: 'Renamed flat' } }),
    expected: { anonymous: 401, guest: 403, otherGuest: 403, host: 200, otherHost: 403 },
  },
  {
    name: 'GET /properties/:id',
    request: () => ({ method: 'GET', url: `/properties/${propertyId}` }),
    expected: { anonymous: 200, guest: 200, otherGuest: 200, host: 200, otherHost: 200 },
  },
  {
    name: 'GET /properties/:id/availability',
    request: () => ({ method: 'GET', url: `/properties/${propertyId}/availability?from=${daysFromNow(0)}&to=${daysFromNow(30)}` }),
    expected: { anonymous: 200, guest: 200, otherGuest: 200, host: 200, otherHost: 200 },
  },
  {
    name: 'POST /bookings',
    request: (_a, i) => ({
      method: 'POST',
      url: '/bookings',
      payload: { propertyId, checkIn: daysFromNow(20 + i * 3), checkOut: daysFromNow(21 + i * 3), guests: 1 },
    }),
    expected: { anonymous: 401, guest: 201, otherGuest: 201, host: 403, otherHost: 403 },
  },
  {
    name: 'GET /bookings',
    request: () => ({ method: 'GET', url: '/bookings' }),
    expected: { anonymous: 401, guest: 200, otherGuest: 200, host: 200, otherHost: 200 },
  },
  {
    name: 'GET /bookings/:id',
    request: () => ({ method: 'GET', url: `/bookings/${bookingId}` }),
    expected: { anonymous: 401, guest: 200, otherGuest: 404, host: 200, otherHost: 404 },
  },
  {
    name: 'GET /health',
    request: () => ({ method: 'GET', url: '/health' }),
    expected: { anonymous: 200, guest: 200, otherGuest: 200, host: 200, otherHost: 200 },
  },
  {
    name: 'GET /docs/json',
    request: () => ({ method: 'GET', url: '/docs/json' }),
    expected: { anonymous: 200, guest: 200, otherGuest: 200, host: 200, otherHost: 200 },
  },
];

describe('authorization matrix', () => {
  for (const c of cases) {
    it(c.name, async () => {
      const got: Record<string, number> = {};
      for (const [i, actor] of ACTORS.entries()) {
        const res = await t.app.inject({ ...c.request(actor, i), headers: headersOf(actor) });
        got[actor] = res.statusCode;
        if (res.statusCode >= 400) expect(res.headers['content-type']).toContain('application/problem+json');
      }
      expect(got).toEqual(c.expected);
    });
  }

  it('POST /bookings/:id/cancel: strangers get 404 and change nothing; guest and host may cancel', async () => {
    const cancel = (a: Actor) => t.app.inject({ method: 'POST', url: `/bookings/${bookingId}/cancel`, headers: headersOf(a) });
    expect((await cancel('anonymous')).statusCode).toBe(401);
    expect((await cancel('otherGuest')).statusCode).toBe(404);
    expect((await cancel('otherHost')).statusCode).toBe(404);
    const { rows } = await t.db.pool.query('select status from bookings where public_id = $1', [bookingId]);
    expect(rows[0].status).toBe('confirmed');
    expect((await cancel('host')).statusCode).toBe(200);
    expect((await cancel('guest')).statusCode).toBe(200);
  });
});
