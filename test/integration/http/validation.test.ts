import fc from 'fast-check';
import type { InjectOptions } from 'fastify';
import { beforeAll, describe, expect, it } from 'vitest';
import { tableCounts } from '../../helpers/db.ts';
import { daysFromNow, listProperty, propertyInput, signUp, type Session, useTestApp } from '../../helpers/app.ts';

const t = useTestApp({ LOG_LEVEL: 'warn' });
let host: Session;
let guest: Session;
let propertyId: string;

beforeAll(async () => {
  [host, guest] = await Promise.all([signUp(t.app, 'host'), signUp(t.app, 'guest')]);
  propertyId = (await listProperty(t.app, host)).id;
});

const validBooking = () => ({ propertyId, checkIn: daysFromNow(10), checkOut: daysFromNow(12), guests: 2 });

async function expectRejected(req: InjectOptions, status: number, field?: string) {
  const before = await tableCounts(t.db);
  const res = await t.app.inject(req);
  expect(res.statusCode, res.body).toBe(status);
  expect(res.headers['content-type']).toContain('application/problem+json');
  const body = res.json();
  expect(body.status).toBe(status);
  expect(typeof body.code).toBe('string');
  if (field) expect(body.errors.map((e: { path: string }) => e.path)).toContain(field);
  expect(await tableCounts(t.db)).toEqual(before);
  return body;
}

describe('POST /bookings validation', () => {
  it.each([
    ['guests as a string', { guests: '2' }, 'body.guests'],
    ['guests zero', { guests: 0 }, 'body.guests'],
    ['guests fractional', { guests: 1.5 }, 'body.guests'],
    ['guests absurd', { guests: 1e12 }, 'body.guests'],
    ['propertyId not a uuid', { propertyId: 'abc' }, 'body.propertyId'],
    ['impossible date', { checkIn: '2026-02-30' }, 'body.checkIn'],
    ['month 13', { checkOut: '2027-13-01' }, 'body.checkOut'],
    ['not a date', { checkIn: 'tomorrow' }, 'body.checkIn'],
    ['date with time', { checkIn: '2027-01-01T00:00:00Z' }, 'body.checkIn'],
    ['checkOut before checkIn', { checkIn: daysFromNow(12), checkOut: daysFromNow(10) }, 'body.checkOut'],
    ['checkOut equal to checkIn', { checkIn: daysFromNow(12), checkOut: daysFromNow(12) }, 'body.checkOut'],
    ['unknown field', { price: 1 }, 'body'],
  ])('%s → 400 naming the field', async (_name, override, field) => {
    await expectRejected(
      { method: 'POST', url: '/bookings', headers: guest.auth, payload: { ...validBooking(), ...override } },
      400,
      field,
    );
  });

  it('lists every bad field at once', async () => {
    const body = await expectRejected(
      { method: 'POST', url: '/bookings', headers: guest.auth, payload: { propertyId: 1, checkIn: 'x' } },
      400,
    );
    const paths = body.errors.map((e: { path: string }) => e.path);
    expect(paths).toEqual(expect.arrayContaining(['body.propertyId', 'body.checkIn', 'body.checkOut', 'body.guests']));
  });

  it('malformed JSON → 400, wrong content type → 415, too large → 413', async () => {
    await expectRejected(
      { method: 'POST', url: '/bookings', headers: { ...guest.auth, 'content-type': 'application/json' }, payload: '{"propertyId":' },
      400,
    );
    await expectRejected(
      { method: 'POST', url: '/bookings', headers: { ...guest.auth, 'content-type': 'text/plain' }, payload: 'hello' },
      415,
    );
    const big = { ...validBooking(), padding: 'x'.repeat(70_000) };
    await expectRejected({ method: 'POST', url: '/bookings', headers: guest.auth, payload: big }, 413);
  });

  it('a JSON array or null instead of an object → 400', async () => {
    await expectRejected(
      { method: 'POST', url: '/bookings', headers: { ...guest.auth, 'content-type': 'application/json' }, payload: '[]' },
      400,
    );
    await expectRejected(
      { method: 'POST', url: '/bookings', headers: { ...guest.auth, 'content-type': 'application/json' }, payload: 'null' },
      400,
    );
  });
});

describe('POST /properties validation', () => {
  it.each([
    ['negative price', { nightlyPrice: -1 }, 'body.nightlyPrice'],
    ['zero price', { nightlyPrice: 0 }, 'body.nightlyPrice'],
    ['price as float', { nightlyPrice: 99.5 }, 'body.nightlyPrice'],
    ['absurd price', { nightlyPrice: 1e15 }, 'body.nightlyPrice'],
    ['country name instead of code', { country: 'Portugal' }, 'body.country'],
    ['currency too long', { currency: 'EURO' }, 'body.currency'],
    ['empty title', { title: '' }, 'body.title'],
    ['huge title', { title: 'x'.repeat(500) }, 'body.title'],
    ['maxGuests zero', { maxGuests: 0 }, 'body.maxGuests'],
    ['unknown field', { hostId: '00000000-0000-4000-8000-000000000000' }, 'body'],
  ])('%s → 400 naming the field', async (_name, override, field) => {
    await expectRejected({ method: 'POST', url: '/properties', headers: host.auth, payload: propertyInput(override) }, 400, field);
  });

  it('PATCH with an empty body or a bad field → 400', async () => {
    await expectRejected({ method: 'PATCH', url: `/properties/${propertyId}`, headers: host.auth, payload: {} }, 400);
    await expectRejected(
      { method: 'PATCH', url: `/properties/${propertyId}`, headers: host.auth, payload: { maxGuests: -3 } },
      400,
      'body.maxGuests',
    );
  });
});

describe('path and query validation', () => {
  it.each([
    ['GET', '/properties/not-a-uuid', 'params.id'],
    ['GET', '/properties/123/availability?from=2027-01-01&to=2027-01-02', 'params.id'],
    ['GET', '/bookings/1', 'params.id'],
    ['POST', '/bookings/%27%3B%20drop%20table%20bookings--/cancel', 'params.id'],
  ])('%s %s → 400', async (method, url, field) => {
    await expectRejected({ method: method as 'GET' | 'POST', url, headers: guest.auth }, 400, field);
  });

  it('availability with bad ranges → 400', async () => {
    await expectRejected(
      { method: 'GET', url: `/properties/${propertyId}/availability?from=2027-02-30&to=2027-03-05` },
      400,
      'querystring.from',
    );
    await expectRejected(
      { method: 'GET', url: `/properties/${propertyId}/availability?from=2027-03-05&to=2027-03-01` },
      400,
      'querystring.to',
    );
    await expectRejected({ method: 'GET', url: `/properties/${propertyId}/availability` }, 400);
    await expectRejected({ method: 'GET', url: '/bookings?limit=1000', headers: guest.auth }, 400, 'querystring.limit');
  });

  it('unknown route → 404 problem', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/nope' });
    expect(res.statusCode).toBe(404);
    expect(res.json().code).toBe('not_found');
  });
});

describe('property-based: random bodies never cause a 5xx or a write when rejected', () => {
  // Near-valid values mixed with junk, so the runs reach past the schema into the service rules.
  const dateish = fc.oneof(
    fc.integer({ min: -30, max: 400 }).map(daysFromNow),
    fc.constantFrom('2026-02-30', '2027-13-01', '0000-00-00', '9999-12-31', '', 'yesterday'),
    fc.string(),
  );
  const anyValue = fc.oneof(fc.anything(), fc.string({ maxLength: 50 }), fc.integer(), fc.double());

  it('POST /bookings', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            propertyId: fc.oneof(fc.constant(propertyId), fc.uuid(), anyValue),
            checkIn: fc.oneof(dateish, anyValue),
            checkOut: fc.oneof(dateish, anyValue),
            guests: fc.oneof(fc.integer({ min: -5, max: 10 }), anyValue),
            extra: anyValue,
          },
          { requiredKeys: [] },
        ),
        async (body) => {
          const before = await tableCounts(t.db);
          const res = await t.app.inject({ method: 'POST', url: '/bookings', headers: guest.auth, payload: body as object });
          expect(res.statusCode, res.body).toBeLessThan(500);
          if (res.statusCode >= 400) expect(await tableCounts(t.db)).toEqual(before);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('POST /properties', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            title: fc.oneof(fc.string({ maxLength: 300 }), anyValue),
            description: fc.oneof(fc.string({ maxLength: 100 }), anyValue),
            city: fc.oneof(fc.string({ maxLength: 20 }), anyValue),
            country: fc.oneof(fc.string({ minLength: 2, maxLength: 2 }), anyValue),
            currency: fc.oneof(fc.string({ minLength: 3, maxLength: 3 }), anyValue),
            nightlyPrice: fc.oneof(fc.integer(), fc.double(), anyValue),
            cleaningFee: fc.oneof(fc.integer(), anyValue),
            maxGuests: fc.oneof(fc.integer({ min: -5, max: 200 }), anyValue),
            active: fc.oneof(fc.boolean(), anyValue),
          },
          { requiredKeys: [] },
        ),
        async (body) => {
          const before = await tableCounts(t.db);
          const res = await t.app.inject({ method: 'POST', url: '/properties', headers: host.auth, payload: body as object });
          expect(res.statusCode, res.body).toBeLessThan(500);
          if (res.statusCode >= 400) expect(await tableCounts(t.db)).toEqual(before);
        },
      ),
      { numRuns: 150 },
    );
  });
});
