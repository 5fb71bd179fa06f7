import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, uniqueEmail, type TestApp } from '../../helpers/app.ts';

/*
 * What a public API owes its callers and itself: security headers on every response (errors
 * included), a body size limit, rate limiting on authentication, and CORS closed unless configured.
 * Each app here is built with the setting under test made small, so the limit is reached quickly.
 */

let db: TestDatabase;
const apps: TestApp[] = [];

async function appWith(env: Record<string, string> = {}) {
  const t = await buildTestApp(db, env);
  apps.push(t);
  return t.app;
}

beforeAll(async () => {
  db = await createTestDatabase('security');
});

afterAll(async () => {
  for (const t of apps) await t.app.close();
  await db?.drop();
});

const HELMET_HEADERS: Record<string, RegExp> = {
  'content-security-policy': /default-src 'self'/,
  'strict-transport-security': /max-age=\d+/,
  'x-content-type-options': /^nosniff$/,
  'x-frame-options': /^SAMEORIGIN$/,
  'referrer-policy': /no-referrer/,
  'cross-origin-opener-policy': /^same-origin$/,
  'cross-origin-resource-policy': /^same-origin$/,
  'x-dns-prefetch-control': /^off$/,
  'x-download-options': /^noopen$/,
  'x-permitted-cross-domain-policies': /^none$/,
};

describe('security headers (helmet)', () => {
  it('are on successes, client errors and unknown routes alike, and X-Powered-By is absent', async () => {
    const app = await appWith();
    const responses = {
      health: await app.inject({ method: 'GET', url: '/health' }),
      validation: await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'nope' } }),
      unauthorized: await app.inject({ method: 'GET', url: '/bookings' }),
      notFound: await app.inject({ method: 'GET', url: '/no-such-route' }),
    };
    expect(responses.health.statusCode).toBe(200);
    expect(responses.validation.statusCode).toBe(400);
    expect(responses.unauthorized.statusCode).toBe(401);
    expect(responses.notFound.statusCode).toBe(404);
    for (const [name, res] of Object.entries(responses)) {
      for (const [header, pattern] of Object.entries(HELMET_HEADERS)) {
        expect(res.headers[header], `${name}: ${header}`).toMatch(pattern);
      }
      expect(res.headers['x-powered-by'], name).toBeUndefined();
    }
  });
});

describe('body size limit', () => {
  it('answers 413 payload_too_large as a problem document, declared or streamed, and writes nothing', async () => {
    const app = await appWith({ BODY_LIMIT_BYTES: '2048' });
    const email = uniqueEmail('big');
    const body = (padding: number) => ({ email, password: 'correct horse battery', name: 'x'.repeat(padding), role: 'guest' });

    const big = await app.inject({ method: 'POST', url: '/auth/register', payload: body(3000) });
    expect(big.statusCode).toBe(413);
    expect(big.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(big.json()).toMatchObject({ status: 413, code: 'payload_too_large' });
    expect(big.headers['x-content-type-options']).toBe('nosniff');

    // Without a Content-Length (chunked), the limit is enforced while reading.
    const streamed = await app.inject({
      method: 'POST',
      url: '/auth/register',
      headers: { 'content-type': 'application/json' },
      payload: Readable.from([Buffer.from(JSON.stringify(body(3000)))]),
    });
    expect(streamed.statusCode).toBe(413);
    expect(streamed.json().code).toBe('payload_too_large');

    const { rows } = await db.pool.query('select count(*)::int as n from users where email = $1', [email]);
    expect(rows[0].n).toBe(0);

    // Under the limit, the same request goes through: the limit is what refused it.
    const small = await app.inject({ method: 'POST', url: '/auth/register', payload: { ...body(0), name: 'Small' } });
    expect(small.statusCode, small.body).toBe(201);
  });
});

describe('rate limiting on authentication', () => {
  it('answers 429 rate_limited after RATE_LIMIT_AUTH_PER_MINUTE attempts, per client address', async () => {
    const app = await appWith({ RATE_LIMIT_AUTH_PER_MINUTE: '3' });
    const attempt = (remoteAddress: string, headers: Record<string, string> = {}) =>
      app.inject({
        method: 'POST',
        url: '/auth/login',
        remoteAddress,
        headers,
        payload: { email: 'nobody@example.test', password: 'wrong password' },
      });

    for (let i = 0; i < 3; i++) expect((await attempt('10.0.0.1')).statusCode).toBe(401);
    const limited = await attempt('10.0.0.1');
    expect(limited.statusCode).toBe(429);
    expect(limited.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(limited.json()).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);

    // X-Forwarded-For is not trusted by default: it cannot buy a fresh budget.
    expect((await attempt('10.0.0.1', { 'x-forwarded-for': '203.0.113.9' })).statusCode).toBe(429);
    // Another address has its own budget.
    expect((await attempt('10.0.0.2')).statusCode).toBe(401);

    // Registration is limited too; unauthenticated reads are not.
    const register = () =>
      app.inject({
        method: 'POST',
        url: '/auth/register',
        remoteAddress: '10.0.0.3',
        payload: { email: 'not-an-email', password: 'x', name: 'x', role: 'guest' },
      });
    for (let i = 0; i < 3; i++) expect((await register()).statusCode).toBe(400);
    expect((await register()).statusCode).toBe(429);
    for (let i = 0; i < 10; i++) {
      expect((await app.inject({ method: 'GET', url: '/health', remoteAddress: '10.0.0.1' })).statusCode).toBe(200);
    }
  });
});

describe('CORS', () => {
  it('is closed by default: no Access-Control-Allow-Origin for a foreign origin, on requests or preflights', async () => {
    const app = await appWith();
    const simple = await app.inject({ method: 'GET', url: '/health', headers: { origin: 'https://evil.example' } });
    expect(simple.statusCode).toBe(200);
    expect(simple.headers['access-control-allow-origin']).toBeUndefined();
    expect(simple.headers['access-control-allow-credentials']).toBeUndefined();

    const preflight = await app.inject({
      method: 'OPTIONS',
      url: '/bookings',
      headers: {
        origin: 'https://evil.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization,content-type',
      },
    });
    expect(preflight.headers['access-control-allow-origin']).toBeUndefined();
    expect(preflight.headers['access-control-allow-methods']).toBeUndefined();
  });

  it('allows exactly the origins in CORS_ORIGINS', async () => {
    const app = await appWith({ CORS_ORIGINS: 'https://app.example, https://admin.example' });
    const allowed = await app.inject({ method: 'GET', url: '/health', headers: { origin: 'https://app.example' } });
    expect(allowed.headers['access-control-allow-origin']).toBe('https://app.example');
    expect(allowed.headers['vary']).toMatch(/origin/i);

    const preflight = await app.inject({
      method: 'OPTIONS',
      url: '/bookings',
      headers: { origin: 'https://admin.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.statusCode).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe('https://admin.example');

    for (const origin of ['https://evil.example', 'https://app.example.evil.example', 'http://app.example']) {
      const res = await app.inject({ method: 'GET', url: '/health', headers: { origin } });
      expect(res.headers['access-control-allow-origin'], origin).toBeUndefined();
    }
  });
});
