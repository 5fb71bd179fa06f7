import { describe, expect, it } from 'vitest';
import type { InjectOptions } from 'fastify';
import { tableCounts } from '../../helpers/db.ts';
import { listProperty, propertyInput, signUp, uniqueEmail, useTestApp } from '../../helpers/app.ts';
import type { SearchIndex } from '../../../src/search/search-index.ts';

/*
 * Bad input is a 400 that names the field, never a 5xx. Control characters in
 * single-line text fields are refused by validation; a cursor that decodes to values PostgreSQL
 * would refuse is an `invalid_cursor`; and a data exception (SQLSTATE 22xxx) that still reaches
 * the database is the client's fault (400), while only an unreachable database is a 503.
 */

/** A search index that fails every query with the given error (the rest of the app is real). */
let indexError: Error = new Error('unset');
const failingIndex: SearchIndex = {
  query: async () => {
    throw indexError;
  },
  upsert: async () => ({ written: false }),
  remove: async () => false,
  sync: async () => ({ written: 0, unchanged: 0, removed: 0 }),
  listIds: async () => [],
  count: async () => 0,
  expectedWaitMs: () => 0,
  isBusy: () => false,
  close: async () => {},
};

const t = useTestApp({ LOG_LEVEL: 'warn' });
const broken = useTestApp({ LOG_LEVEL: 'fatal' }, { searchIndex: failingIndex });

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const SOME_UUID = '00000000-0000-4000-8000-000000000000';

async function expect400(req: InjectOptions, code: string, field: string) {
  const before = await tableCounts(t.db);
  const res = await t.app.inject(req);
  expect(res.statusCode, res.body).toBe(400);
  expect(res.headers['content-type']).toContain('application/problem+json');
  const body = res.json();
  expect(body.code).toBe(code);
  expect(body.errors.map((e: { path: string }) => e.path)).toContain(field);
  expect(await tableCounts(t.db)).toEqual(before);
  return body;
}

const CONTROL = {
  'newline and NUL': 'Eve\n\u0000',
  'a trailing newline': 'Eve\n',
  'a carriage return': 'Eve\rMallory',
  'a tab': 'Eve\tMallory',
  'a bell': 'Eve\u0007',
  DEL: 'Eve\u007f',
  'a C1 control': 'Eve\u0085Mallory',
  'a Unicode line separator': 'Eve\u2028Mallory',
};

describe('single-line text fields refuse control characters (400 naming the field)', () => {
  for (const [what, value] of Object.entries(CONTROL)) {
    it(`POST /auth/register name with ${what}`, async () => {
      await expect400(
        {
          method: 'POST',
          url: '/auth/register',
          payload: { email: uniqueEmail(), password: 'correct horse battery', name: value, role: 'guest' },
        },
        'validation_failed',
        'body.name',
      );
    });
  }

  it('POST /auth/register email with a newline', async () => {
    await expect400(
      {
        method: 'POST',
        url: '/auth/register',
        payload: { email: `${uniqueEmail()}\n`, password: 'correct horse battery', name: 'Eve', role: 'guest' },
      },
      'validation_failed',
      'body.email',
    );
  });

  it('POST /properties title and city; PATCH title', async () => {
    const host = await signUp(t.app, 'host');
    await expect400(
      { method: 'POST', url: '/properties', headers: host.auth, payload: propertyInput({ title: 'Nice\nflat' }) },
      'validation_failed',
      'body.title',
    );
    await expect400(
      { method: 'POST', url: '/properties', headers: host.auth, payload: propertyInput({ city: 'Porto\u0000' }) },
      'validation_failed',
      'body.city',
    );
    const p = await listProperty(t.app, host);
    await expect400(
      { method: 'PATCH', url: `/properties/${p.id}`, headers: host.auth, payload: { title: 'Nice\u2029flat' } },
      'validation_failed',
      'body.title',
    );
  });

  it('a description keeps its line breaks and tabs but refuses NUL and other controls', async () => {
    const host = await signUp(t.app, 'host');
    const ok = await t.app.inject({
      method: 'POST',
      url: '/properties',
      headers: host.auth,
      payload: propertyInput({ description: 'Line one\r\nLine\ttwo' }),
    });
    expect(ok.statusCode, ok.body).toBe(201);
    expect(ok.json().description).toBe('Line one\r\nLine\ttwo');
    await expect400(
      { method: 'POST', url: '/properties', headers: host.auth, payload: propertyInput({ description: 'a\u0000b' }) },
      'validation_failed',
      'body.description',
    );
    await expect400(
      { method: 'POST', url: '/properties', headers: host.auth, payload: propertyInput({ description: 'a\u001bb' }) },
      'validation_failed',
      'body.description',
    );
  });

  it('GET /search q and city', async () => {
    await expect400({ method: 'GET', url: '/search?q=flat%0A' }, 'validation_failed', 'querystring.q');
    await expect400({ method: 'GET', url: '/search?city=Porto%E2%80%A8' }, 'validation_failed', 'querystring.city');
  });

  it('ordinary names, accents and emoji included, still pass', async () => {
    for (const name of ['Zoë O’Brien-Łukasz', '山田 太郎', 'Ana 🙂']) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/auth/register',
        payload: { email: uniqueEmail(), password: 'correct horse battery', name, role: 'guest' },
      });
      expect(res.statusCode, res.body).toBe(201);
      expect(res.json().user.name).toBe(name);
    }
  });
});

describe('cursors', () => {
  // Each of these has the shape of a rank cursor; PostgreSQL refuses the value as `real` (22003).
  for (const r of ['1e99', '1e-99', '3.5e38', '-1', 'NaN', 'Infinity', '1'.repeat(60)]) {
    it(`GET /search with a crafted rank ${r.slice(0, 12)} → 400 invalid_cursor`, async () => {
      await expect400({ method: 'GET', url: `/search?q=flat&cursor=${b64({ r, i: SOME_UUID })}` }, 'invalid_cursor', 'querystring.cursor');
    });
  }

  it('GET /search: a cursor that is not one, or a rank cursor without q → invalid_cursor', async () => {
    await expect400({ method: 'GET', url: '/search?cursor=not-a-cursor' }, 'invalid_cursor', 'querystring.cursor');
    await expect400({ method: 'GET', url: `/search?cursor=${b64({ r: '0.1', i: SOME_UUID })}` }, 'invalid_cursor', 'querystring.cursor');
    await expect400({ method: 'GET', url: `/search?q=x&cursor=${b64({ i: 'nope' })}` }, 'invalid_cursor', 'querystring.cursor');
  });

  it('GET /search: a valid rank cursor, tiny or large, is still accepted', async () => {
    for (const r of ['0', '0.1', '1e-05', '1.2345679e+06']) {
      const res = await t.app.inject({ method: 'GET', url: `/search?q=flat&cursor=${b64({ r, i: SOME_UUID })}` });
      expect(res.statusCode, `${r}: ${res.body}`).toBe(200);
    }
  });

  it('GET /bookings with a forged cursor → 400 invalid_cursor', async () => {
    const guest = await signUp(t.app, 'guest');
    await expect400({ method: 'GET', url: '/bookings?cursor=not-a-cursor', headers: guest.auth }, 'invalid_cursor', 'querystring.cursor');
  });
});

describe('database errors: a data exception is the client’s, only an unreachable database is a 503', () => {
  const pgError = (code: string, message: string) => Object.assign(new Error(message), { code, severity: 'ERROR' });

  it('a 22xxx from the search index → 400, not 503', async () => {
    for (const [code, message] of [
      ['22003', '"1e99" is out of range for type real'],
      ['22P02', 'invalid input syntax for type uuid: "x"'],
      ['22021', 'invalid byte sequence for encoding "UTF8": 0x00'],
    ]) {
      indexError = Object.assign(new Error('Failed query'), { cause: pgError(code!, message!) }); // drizzle's wrapping
      const res = await broken.app.inject({ method: 'GET', url: '/search?q=flat' });
      expect(res.statusCode, `${code}: ${res.body}`).toBe(400);
      expect(res.json().code).toBe('bad_request');
      expect(res.body).not.toContain(message!); // the database's words are logged, not shown
    }
  });

  it('an unreachable index is still a 503', async () => {
    indexError = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    const res = await broken.app.inject({ method: 'GET', url: '/search?q=flat' });
    expect(res.statusCode).toBe(503);
    expect(res.json().code).toBe('service_unavailable');
  });
});
