import fc from 'fast-check';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createUser } from '../../../src/users/auth.service.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, daysFromNow, listProperty, propertyInput, signUp, type Session, type TestApp } from '../../helpers/app.ts';

/*
 * Fuzzing every JSON route with random and malicious input. Two rules hold for every request:
 *   1. never a 5xx (a 5xx means input reached code that did not expect it);
 *   2. a rejected request (4xx) changes nothing in the database (but for a booking refused for
 *      its dates under an Idempotency-Key, whose refusal is recorded as that key's answer).
 * Rule 2 is checked with a fingerprint of every table (row count + md5 of the rows' text), taken
 * before and after each request, so an UPDATE that slipped through is caught as well as an INSERT.
 * A random request that happens to be valid may succeed; the baseline then moves with it.
 */

let db: TestDatabase;
let t: TestApp;
let app: FastifyInstance;
let host: Session;
let otherHost: Session;
let guest: Session;
let otherGuest: Session;
let admin: { authorization: string };
let propertyId: string;
let bookingId: string;

const TABLES = ['users', 'sessions', 'properties', 'bookings', 'idempotency_keys', 'outbox', 'outbox_audit', 'search_documents'];

async function fingerprint(): Promise<Record<string, string>> {
  const parts = TABLES.map(
    (tbl) =>
      `select '${tbl}' as t, count(*)::text || ':' || coalesce(md5(string_agg(x::text, '|' order by x::text)), '') as f from ${tbl} x`,
  );
  const { rows } = await db.pool.query<{ t: string; f: string }>(parts.join(' union all '));
  return Object.fromEntries(rows.map((r) => [r.t, r.f]));
}

let baseline: Record<string, string>;

const rowCount = (f: string) => Number(f.split(':')[0]);
const headerOf = (opts: InjectOptions, name: string) => (opts.headers as Record<string, string | undefined> | undefined)?.[name];

/**
 * Sends one request and applies the two rules. `mustReject`: the input is invalid by construction,
 * so anything but a 4xx is a failure too.
 */
async function probe(opts: InjectOptions, mustReject: boolean): Promise<LightMyRequestResponse> {
  const res = await app.inject(opts);
  const what = `${opts.method} ${(typeof opts.url === 'object' ? JSON.stringify(opts.url) : String(opts.url)).slice(0, 120)} -> ${res.statusCode} ${res.body.slice(0, 300)}`;
  expect(res.statusCode, what).toBeLessThan(500);
  if (res.statusCode >= 400) {
    // Every error is a problem document with our stable code.
    expect(res.headers['content-type'], what).toMatch(/^application\/problem\+json/);
    expect(typeof res.json().code, what).toBe('string');
    const after = await fingerprint();
    if (res.statusCode === 409 && headerOf(opts, 'idempotency-key') !== undefined) {
      // A booking refused for its dates under an Idempotency-Key: the refusal is that key's answer
      // from now on, recorded on purpose (src/bookings/booking.service.ts), and nothing else.
      const { idempotency_keys: keysAfter, ...restAfter } = after;
      const { idempotency_keys: keysBefore, ...restBefore } = baseline;
      expect(restAfter, `database changed by a rejected request: ${what}`).toEqual(restBefore);
      expect(rowCount(keysAfter!), `the refusal recorded for its key: ${what}`).toBe(rowCount(keysBefore!) + 1);
      baseline = after;
    } else {
      expect(after, `database changed by a rejected request: ${what}`).toEqual(baseline);
    }
  } else {
    expect(mustReject, `invalid input accepted: ${what}`).toBe(false);
    baseline = await fingerprint();
  }
  return res;
}

const json = (method: 'POST' | 'PATCH' | 'GET', url: string, payload: unknown, headers: Record<string, string> = {}) =>
  ({ method, url, payload: JSON.stringify(payload), headers: { 'content-type': 'application/json', ...headers } }) as InjectOptions;

const raw = (method: 'POST' | 'PATCH', url: string, body: string | Buffer, headers: Record<string, string>) =>
  ({ method, url, payload: body, headers }) as InjectOptions;

beforeAll(async () => {
  db = await createTestDatabase('fuzz');
  t = await buildTestApp(db);
  app = t.app;
  host = await signUp(app, 'host');
  otherHost = await signUp(app, 'host');
  guest = await signUp(app, 'guest');
  otherGuest = await signUp(app, 'guest');
  propertyId = (await listProperty(app, host)).id;
  // Admins cannot sign up; made as `npm run create-admin` makes them, then signed in.
  await createUser(db.db, { email: 'fuzz-admin@example.test', password: 'correct horse battery', name: 'Admin', role: 'admin' });
  const login = await app.inject({
    method: 'POST',
    url: '/auth/login',
    payload: { email: 'fuzz-admin@example.test', password: 'correct horse battery' },
  });
  admin = { authorization: `Bearer ${login.json().token}` };
  const res = await app.inject({
    method: 'POST',
    url: '/bookings',
    headers: guest.auth,
    payload: { propertyId, checkIn: daysFromNow(30), checkOut: daysFromNow(33), guests: 2 },
  });
  expect(res.statusCode, res.body).toBe(201);
  bookingId = res.json().id;
  baseline = await fingerprint();
});

// Each test starts from the database as it is: one failure does not cascade into the next.
beforeEach(async () => {
  baseline = await fingerprint();
});

afterAll(async () => {
  await app?.close();
  await db?.drop();
});

// ---------------------------------------------------------------------------------------------
// The classic payloads: each is invalid for every JSON route.

const deepObject = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
const deepArray = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

const SQL_FRAGMENTS = [
  "' OR '1'='1",
  "'; DROP TABLE bookings; --",
  "1; update users set role='admin' --",
  "' UNION SELECT password_hash FROM users --",
  '$$; select pg_sleep(10); $$',
  "\\'; select 1; --",
  "00000000-0000-0000-0000-000000000000' or 1=1 --",
];

/** Bodies that are not JSON objects at all, sent as application/json. */
const CLASSIC_RAW_JSON: Array<[string, string | Buffer]> = [
  ['empty body', ''],
  ['whitespace', '   '],
  ['null', 'null'],
  ['number', '42'],
  ['string', '"hello"'],
  ['array of objects', '[{"email":"a@b.test"}]'],
  ['empty array', '[]'],
  ['truncated JSON', '{"email": "a@b.test", '],
  ['trailing garbage', '{}xyz'],
  ['single quotes', "{'email': 'a'}"],
  ['NaN', '{"guests": NaN}'],
  ['__proto__ key', '{"__proto__": {"role": "admin", "isAdmin": true}}'],
  ['nested __proto__', '{"a": {"__proto__": {"polluted": 1}}}'],
  ['constructor.prototype', '{"constructor": {"prototype": {"polluted": 1}}}'],
  ['deep object nesting', deepObject(5_000)],
  ['deep array nesting', deepArray(10_000)],
  ['invalid UTF-8 bytes', Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('"}')])],
  ['overlong UTF-8 slash', Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')])],
  ['UTF-16 BOM body', Buffer.from('\ufeff{"a":1}', 'utf16le')],
  ['lone surrogate escape', '{"name":"\\ud800"}'],
  ['NUL escape', '{"name":"a\\u0000b"}'],
  ['huge number', '{"guests": 1e400}'],
  ['duplicate keys', '{"role":"guest","role":"admin"}'],
];

/** Wrong content types with a plausible body. */
const WRONG_CONTENT_TYPES: Array<[string, string]> = [
  ['text/plain', '{"email":"a@b.test"}'],
  ['application/x-www-form-urlencoded', 'email=a%40b.test&password=xxxxxxxxxxxx'],
  ['multipart/form-data; boundary=xyz', '--xyz\r\nContent-Disposition: form-data; name="email"\r\n\r\na@b.test\r\n--xyz--'],
  ['application/xml', '<email>a@b.test</email>'],
  ['application/json; charset=latin1', '{"email":"a@b.test"}'],
  ['application/jsonp', '{"email":"a@b.test"}'],
  ['image/png', '\x89PNG\r\n'],
  ['', '{"email":"a@b.test"}'],
];

/**
 * Object bodies, valid JSON, for the route. Most are invalid (must be rejected); SQL fragments in
 * free-text fields are legitimate text and may be accepted, stored verbatim, never executed.
 */
function classicObjects(valid: Record<string, unknown>, optional: string[]): Array<[string, unknown, boolean]> {
  const keys = Object.keys(valid);
  const out: Array<[string, unknown, boolean]> = [
    ['empty object', {}, true],
    ['array instead of object', [valid], true],
    ['extra key', { ...valid, role: 'admin', isAdmin: true }, true],
    ['huge string in every field', Object.fromEntries(keys.map((k) => [k, 'x'.repeat(60_000)])), true],
    ['body over the limit', { ...valid, padding: 'x'.repeat(70_000) }, true],
    ['objects in every field', Object.fromEntries(keys.map((k) => [k, { $gt: '' }])), true],
    ['arrays in every field', Object.fromEntries(keys.map((k) => [k, [valid[k]]])), true],
    ['nulls in every field', Object.fromEntries(keys.map((k) => [k, null])), true],
  ];
  if (keys.some((k) => typeof valid[k] === 'number')) {
    out.push([
      'numbers as strings',
      Object.fromEntries(Object.entries(valid).map(([k, v]) => [k, typeof v === 'number' ? String(v) : v])),
      true,
    ]);
  }
  for (const k of keys) {
    const { [k]: _removed, ...without } = valid;
    out.push([`${k} missing`, without, !optional.includes(k)]);
    for (const s of SQL_FRAGMENTS) out.push([`${k} = SQL ${s}`, { ...valid, [k]: s }, false]);
    if (typeof valid[k] === 'number') {
      for (const n of [-1, 0.5, 1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, 2 ** 31]) out.push([`${k} = ${n}`, { ...valid, [k]: n }, true]);
    }
  }
  return out;
}

interface JsonRoute {
  name: string;
  method: 'POST' | 'PATCH';
  url: () => string;
  headers: () => Record<string, string>;
  valid: () => Record<string, unknown>;
  /** Fields that may be left out (defaults, or PATCH where every field is optional). */
  optional?: string[];
}

const ROUTES: JsonRoute[] = [
  {
    name: 'POST /auth/register',
    method: 'POST',
    url: () => '/auth/register',
    headers: () => ({}),
    valid: () => ({ email: 'fuzz-register@example.test', password: 'correct horse battery', name: 'Fuzz', role: 'guest' }),
  },
  {
    name: 'POST /auth/login',
    method: 'POST',
    url: () => '/auth/login',
    headers: () => ({}),
    valid: () => ({ email: guest.user.email, password: 'correct horse battery' }),
  },
  {
    name: 'POST /properties',
    method: 'POST',
    url: () => '/properties',
    headers: () => host.auth,
    valid: () => propertyInput(),
    optional: ['description', 'currency', 'cleaningFee'],
  },
  {
    name: 'PATCH /properties/:id',
    method: 'PATCH',
    url: () => `/properties/${propertyId}`,
    headers: () => host.auth,
    valid: () => ({ title: 'Renamed flat', nightlyPrice: 12_000, maxGuests: 3 }),
    optional: ['title', 'nightlyPrice', 'maxGuests'],
  },
  {
    name: 'POST /admin/outbox/retry',
    method: 'POST',
    url: () => '/admin/outbox/retry',
    headers: () => admin,
    valid: () => ({ topic: 'booking.created' }),
  },
  {
    name: 'POST /bookings',
    method: 'POST',
    url: () => '/bookings',
    headers: () => ({ ...guest.auth, 'idempotency-key': 'fuzz-key-1' }),
    valid: () => ({ propertyId, checkIn: daysFromNow(60), checkOut: daysFromNow(62), guests: 2 }),
  },
];

describe('classic malicious payloads on every JSON route', () => {
  for (const route of ROUTES) {
    it(`${route.name}: never a 5xx, always rejected, database unchanged`, async () => {
      for (const [label, body] of CLASSIC_RAW_JSON) {
        const res = await probe(raw(route.method, route.url(), body, { ...route.headers(), 'content-type': 'application/json' }), true);
        expect(res.statusCode, label).toBeGreaterThanOrEqual(400);
      }
      for (const [type, body] of WRONG_CONTENT_TYPES) {
        const headers: Record<string, string> = { ...route.headers() };
        if (type) headers['content-type'] = type;
        await probe(raw(route.method, route.url(), body, headers), true);
      }
      for (const [label, body, mustReject] of classicObjects(route.valid(), route.optional ?? [])) {
        const res = await probe(json(route.method, route.url(), body, route.headers()), mustReject);
        if (label === 'body over the limit') expect(res.statusCode, label).toBe(413);
      }
    });
  }

  it('POST /bookings/:id/cancel: SQL and junk in the id, junk bodies from a stranger, never a 5xx', async () => {
    for (const s of [
      ...SQL_FRAGMENTS,
      'x'.repeat(10_000),
      '%00',
      '..%2F..%2Fetc%2Fpasswd',
      '%E0%A4%A',
      '00000000-0000-0000-0000-000000000000',
    ]) {
      await probe({ method: 'POST', url: `/bookings/${encodeURIComponent(s)}/cancel`, headers: guest.auth }, true);
    }
    // A stranger cannot cancel, whatever they send along.
    for (const [, body] of CLASSIC_RAW_JSON) {
      await probe(raw('POST', `/bookings/${bookingId}/cancel`, body, { ...otherGuest.auth, 'content-type': 'application/json' }), true);
    }
    // Even the owner's cancel is refused when the body is not parseable: the parser runs first.
    for (const [, body] of CLASSIC_RAW_JSON.filter(([l]) => /truncated|garbage|single quotes|NaN|invalid UTF-8|overlong|BOM/.test(l))) {
      await probe(raw('POST', `/bookings/${bookingId}/cancel`, body, { ...guest.auth, 'content-type': 'application/json' }), true);
    }
    // A host who does not own the property cannot edit it either.
    await probe(json('PATCH', `/properties/${propertyId}`, { title: 'Hijacked' }, otherHost.auth), true);
  });

  it('rejects forged and malformed Authorization headers without a 5xx', async () => {
    const tokens = [
      '',
      'Bearer',
      'Bearer ',
      `Bearer ${"' OR 1=1 --".padEnd(30, 'x')}`,
      `Bearer ${'a'.repeat(5_000)}`,
      `Basic ${Buffer.from('a:b').toString('base64')}`,
      `Bearer ${host.token}x`,
      `bearer ${host.token}`,
    ];
    for (const authorization of tokens) {
      await probe(json('POST', '/properties', propertyInput(), { authorization }), true);
      await probe({ method: 'GET', url: '/bookings', headers: { authorization } }, true);
    }
    // A guest's valid token does not let them list a property, nor a host's let them book: each
    // sends a body the route accepts from the right role, so only the role check can refuse it.
    const listing = await probe(json('POST', '/properties', propertyInput(), guest.auth), true);
    expect(listing.statusCode, listing.body).toBe(403);
    // The booking route's valid body, on dates of its own so it cannot collide with other bookings.
    const validBooking = {
      ...ROUTES.find((r) => r.name === 'POST /bookings')!.valid(),
      checkIn: daysFromNow(90),
      checkOut: daysFromNow(92),
    };
    const asHost = await probe(json('POST', '/bookings', validBooking, { ...host.auth, 'idempotency-key': 'fuzz-host-books' }), true);
    expect(asHost.statusCode, asHost.body).toBe(403);
    // The same request from a guest is a booking: the body was never the reason for the 403.
    const asGuest = await probe(json('POST', '/bookings', validBooking, { ...guest.auth, 'idempotency-key': 'fuzz-guest-books' }), false);
    expect(asGuest.statusCode, asGuest.body).toBe(201);
  });

  it('refuses invalid UTF-8 inside an otherwise valid body instead of storing replacement characters', async () => {
    const body = (bytes: number[]) =>
      Buffer.concat([
        Buffer.from('{"email":"utf8-probe@example.test","password":"correct horse battery","role":"guest","name":"A'),
        Buffer.from(bytes),
        Buffer.from('"}'),
      ]);
    for (const bytes of [[0xff], [0xc3, 0x28], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]]) {
      const res = await probe(raw('POST', '/auth/register', body(bytes), { 'content-type': 'application/json' }), true);
      expect(res.json().code).toBe('bad_request');
    }
  });

  it('malformed percent-encoding and over-long path parameters are problem documents, not 5xx', async () => {
    for (const url of [
      '/bookings/%E0%A4%A/cancel',
      '/properties/%zz',
      `/properties/${'a'.repeat(500)}`,
      `/bookings/${'a'.repeat(500)}/cancel`,
    ]) {
      const res = await probe({ method: url.endsWith('cancel') ? 'POST' : 'GET', url, headers: guest.auth }, true);
      expect(res.statusCode, url).toBe(400);
    }
  });

  it('stores SQL fragments in free text verbatim and executes nothing', async () => {
    const name = "Robert'); DROP TABLE users; -- $$ \\' OR 1=1";
    const res = await probe(
      json('POST', '/auth/register', { email: 'bobby-tables@example.test', password: 'correct horse battery', name, role: 'guest' }),
      false,
    );
    expect(res.statusCode, res.body).toBe(201);
    const me = await app.inject({ method: 'GET', url: '/me', headers: { authorization: `Bearer ${res.json().token}` } });
    expect(me.json().name).toBe(name);
    const { rows } = await db.pool.query('select count(*)::int as n from users');
    expect(rows[0].n).toBeGreaterThan(4);
  });

  it('rejects malformed Idempotency-Key headers without a 5xx', async () => {
    const body = { propertyId, checkIn: daysFromNow(70), checkOut: daysFromNow(71), guests: 1 };
    for (const key of ['has space', 'x'.repeat(300), "'; drop table idempotency_keys; --\u00e9", '\u0000']) {
      await probe(json('POST', '/bookings', body, { ...guest.auth, 'idempotency-key': key }), true);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// GET routes with query strings and path parameters: may succeed, never a 5xx, never a write.

describe('query routes', () => {
  const classicQueryValues = [
    ...SQL_FRAGMENTS,
    '',
    ' ',
    '-1',
    '0',
    '1e9',
    'NaN',
    'Infinity',
    '2024-02-30',
    '9999-12-31',
    '0000-01-01',
    '-001-01-01',
    'x'.repeat(5_000),
    '%00',
    '\u0000',
    '[]',
    '{}',
  ];

  it('classic values in every query parameter and path id', async () => {
    for (const v of classicQueryValues) {
      const q = encodeURIComponent(v);
      await probe({ method: 'GET', url: `/bookings?limit=${q}`, headers: guest.auth }, false);
      await probe({ method: 'GET', url: `/bookings?cursor=${q}`, headers: guest.auth }, false);
      await probe({ method: 'GET', url: `/bookings?cursor=${Buffer.from(v).toString('base64url')}`, headers: host.auth }, false);
      await probe({ method: 'GET', url: `/bookings?limit=5&limit=${q}`, headers: guest.auth }, false);
      await probe({ method: 'GET', url: `/properties/${propertyId}/availability?from=${q}&to=${daysFromNow(40)}` }, false);
      await probe({ method: 'GET', url: `/properties/${propertyId}/availability?from=${daysFromNow(1)}&to=${q}` }, false);
      await probe({ method: 'GET', url: `/properties/${q}` }, false);
      await probe({ method: 'GET', url: `/bookings/${q}`, headers: guest.auth }, false);
      await probe({ method: 'GET', url: `/properties/${q}/availability?from=${daysFromNow(1)}&to=${daysFromNow(5)}` }, false);
      for (const param of ['q', 'city', 'country', 'guests', 'checkIn', 'checkOut', 'minPrice', 'maxPrice', 'limit', 'cursor']) {
        await probe({ method: 'GET', url: `/search?${param}=${q}` }, false);
      }
      await probe({ method: 'GET', url: `/admin/outbox/messages?status=${q}&topic=${q}`, headers: admin }, false);
      await probe({ method: 'GET', url: `/admin/outbox/messages?limit=${q}&cursor=${q}`, headers: admin }, false);
      await probe({ method: 'GET', url: `/admin/outbox/depth?minutes=${q}`, headers: admin }, false);
      await probe({ method: 'GET', url: `/admin/outbox/messages/${q}`, headers: admin }, false);
      await probe({ method: 'POST', url: `/admin/outbox/messages/${q}/retry`, headers: admin }, false);
    }
    // Unknown parameters and prototype keys in the query string.
    await probe({ method: 'GET', url: '/bookings?__proto__[admin]=1', headers: guest.auth }, false);
    await probe({ method: 'GET', url: '/bookings?constructor[prototype][x]=1&limit=2', headers: guest.auth }, false);
    await probe(
      { method: 'GET', url: `/properties/${propertyId}/availability?from=${daysFromNow(1)}&to=${daysFromNow(5)}&extra=1` },
      false,
    );
  });

  it('random query strings (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(
          fc.constantFrom(
            'limit',
            'cursor',
            'from',
            'to',
            'x',
            '__proto__',
            'q',
            'city',
            'guests',
            'minPrice',
            'status',
            'topic',
            'minutes',
          ),
          fc.oneof(
            fc.string(),
            fc.string({ unit: 'binary' }),
            fc.integer().map(String),
            fc.date({ noInvalidDate: true }).map((d) => d.toISOString().slice(0, 10)),
          ),
        ),
        fc.constantFrom('/bookings', `/properties/{p}/availability`, '/search', '/admin/outbox/messages', '/admin/outbox/depth'),
        async (params, path) => {
          const qs = new URLSearchParams(params as Record<string, string>).toString();
          const url = `${path.replace('{p}', propertyId)}?${qs}`;
          await probe({ method: 'GET', url, headers: path.startsWith('/admin') ? admin : guest.auth }, false);
        },
      ),
      { numRuns: 150 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Random bodies (fast-check): any JSON value, and near-valid bodies with one field mutated.

const anyJson = fc.jsonValue({ maxDepth: 4 });

/** A valid body with one field replaced by a random value, a random extra key, or a field removed. */
function nearValid(valid: Record<string, unknown>) {
  const keys = Object.keys(valid);
  return fc.oneof(
    fc
      .record({
        k: fc.constantFrom(...keys),
        v: fc.oneof(anyJson, fc.string({ unit: 'binary', maxLength: 300 }), fc.double(), fc.integer()),
      })
      .map(({ k, v }) => ({ ...valid, [k]: v })),
    fc
      .record({ k: fc.string({ minLength: 1, maxLength: 20 }).filter((k) => !keys.includes(k)), v: anyJson })
      .map(({ k, v }) => ({ ...valid, [k]: v })),
    fc.constantFrom(...keys).map((k) => {
      const { [k]: _gone, ...rest } = valid;
      return rest;
    }),
  );
}

describe('random bodies (fast-check) on every JSON route', () => {
  for (const route of ROUTES) {
    it(`${route.name}: any JSON value`, async () => {
      await fc.assert(
        fc.asyncProperty(anyJson, async (body) => {
          await probe(json(route.method, route.url(), body, route.headers()), false);
        }),
        { numRuns: 120 },
      );
    });

    it(`${route.name}: near-valid bodies`, async () => {
      await fc.assert(
        fc.asyncProperty(nearValid(route.valid()), async (body) => {
          // A near-valid booking that succeeds would take the dates; a fresh key each time so a
          // replay never hides a second attempt.
          const headers = { ...route.headers() };
          if (route.name === 'POST /bookings') headers['idempotency-key'] = `fuzz-${Math.random().toString(36).slice(2)}`;
          await probe(json(route.method, route.url(), body, headers), false);
        }),
        { numRuns: 120 },
      );
    });
  }

  it('POST /bookings/:id/cancel: random ids', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.uuid(), fc.string({ minLength: 1 }), fc.string({ unit: 'binary', minLength: 1 })), async (id) => {
        await probe({ method: 'POST', url: `/bookings/${encodeURIComponent(id)}/cancel`, headers: guest.auth }, false);
      }),
      { numRuns: 150 },
    );
  });
});
