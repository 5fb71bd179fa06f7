import { describe, expect, it } from 'vitest';
import { tableCounts } from '../../helpers/db.ts';
import { buildTestApp, signUp, uniqueEmail, useTestApp } from '../../helpers/app.ts';
import { SESSION_CACHE_MS } from '../../../src/users/session-cache.ts';

const t = useTestApp();

const register = (payload: Record<string, unknown>) => t.app.inject({ method: 'POST', url: '/auth/register', payload });
const login = (payload: Record<string, unknown>) => t.app.inject({ method: 'POST', url: '/auth/login', payload });

describe('register', () => {
  it('creates a user and a session; never returns the password hash', async () => {
    const email = uniqueEmail();
    const res = await register({ email, password: 'long enough pw', name: 'Ana', role: 'guest' });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body.user).toMatchObject({ email, name: 'Ana', role: 'guest' });
    expect(Object.keys(body.user).sort()).toEqual(['createdAt', 'email', 'id', 'name', 'role']);
    expect(body.token).toMatch(/^[A-Za-z0-9_-]{40,}$/);
    const { rows } = await t.db.pool.query('select password_hash from users where email = $1', [email]);
    expect(rows[0].password_hash).toMatch(/^scrypt\$/);
    expect(res.body).not.toContain(rows[0].password_hash);
    const stored = await t.db.pool.query('select token_hash from sessions');
    expect(stored.rows.map((r) => r.token_hash)).not.toContain(body.token);
  });

  it('treats email case-insensitively: 409 email_taken', async () => {
    const email = uniqueEmail();
    expect((await register({ email, password: 'long enough pw', name: 'A', role: 'guest' })).statusCode).toBe(201);
    const res = await register({ email: email.toUpperCase(), password: 'long enough pw', name: 'B', role: 'host' });
    expect(res.statusCode).toBe(409);
    expect(res.json().code).toBe('email_taken');
  });

  it('refuses a password under 10 characters and an admin self-registration, writing nothing', async () => {
    const before = await tableCounts(t.db);
    const weak = await register({ email: uniqueEmail(), password: 'short', name: 'A', role: 'guest' });
    expect(weak.statusCode).toBe(400);
    expect(weak.json().errors).toEqual([{ path: 'body.password', message: 'must be at least 10 characters' }]);
    const admin = await register({ email: uniqueEmail(), password: 'long enough pw', name: 'A', role: 'admin' });
    expect(admin.statusCode).toBe(400);
    expect(admin.json().errors[0].path).toBe('body.role');
    expect(await tableCounts(t.db)).toEqual(before);
  });
});

describe('login and sessions', () => {
  it('signs in, reads /me, and logout revokes the token', async () => {
    const email = uniqueEmail();
    await register({ email, password: 'long enough pw', name: 'Lu', role: 'host' });
    const res = await login({ email: email.toUpperCase(), password: 'long enough pw' });
    expect(res.statusCode).toBe(200);
    const auth = { authorization: `Bearer ${res.json().token}` };
    const me = await t.app.inject({ method: 'GET', url: '/me', headers: auth });
    expect(me.statusCode).toBe(200);
    expect(me.json().email).toBe(email);
    expect((await t.app.inject({ method: 'POST', url: '/auth/logout', headers: auth })).statusCode).toBe(204);
    expect((await t.app.inject({ method: 'GET', url: '/me', headers: auth })).statusCode).toBe(401);
  });

  it('gives the same answer for an unknown email and a wrong password', async () => {
    const s = await signUp(t.app, 'guest');
    const wrong = await login({ email: s.user.email, password: 'not the password' });
    const unknown = await login({ email: uniqueEmail('nobody'), password: 'not the password' });
    expect(wrong.statusCode).toBe(401);
    expect(unknown.statusCode).toBe(401);
    const strip = (b: Record<string, unknown>) => ({ ...b, instance: undefined });
    expect(strip(wrong.json())).toEqual(strip(unknown.json()));
    expect(wrong.json().code).toBe('invalid_credentials');
  });

  it('rejects missing, malformed, unknown and expired tokens with 401', async () => {
    for (const authorization of [undefined, 'Bearer', 'Basic abc', 'Bearer short', `Bearer ${'x'.repeat(43)}`]) {
      const res = await t.app.inject({ method: 'GET', url: '/me', headers: authorization ? { authorization } : {} });
      expect(res.statusCode, String(authorization)).toBe(401);
      expect(res.json().code).toBe('unauthorized');
    }
    const s = await signUp(t.app, 'guest');
    await t.db.pool.query(`update sessions set expires_at = now() - interval '1 second'`);
    expect((await t.app.inject({ method: 'GET', url: '/me', headers: s.auth })).statusCode).toBe(401);
  });
});

describe('session lookups are remembered for at most a second', () => {
  it('logout refuses the token at once, even right after it was used', async () => {
    const s = await signUp(t.app, 'guest');
    expect((await t.app.inject({ method: 'GET', url: '/me', headers: s.auth })).statusCode).toBe(200);
    expect((await t.app.inject({ method: 'POST', url: '/auth/logout', headers: s.auth })).statusCode).toBe(204);
    expect((await t.app.inject({ method: 'GET', url: '/me', headers: s.auth })).statusCode).toBe(401);
  });

  it('a session revoked elsewhere (another API process, SQL) is refused within ~1 s', async () => {
    const s = await signUp(t.app, 'guest');
    expect((await t.app.inject({ method: 'GET', url: '/me', headers: s.auth })).statusCode).toBe(200);
    const revokedAt = Date.now();
    await t.db.pool.query(`update sessions set revoked_at = now() where user_id = (select id from users where public_id = $1)`, [
      s.user.id,
    ]);
    // Poll: the answer may stay 200 only while the remembered lookup is younger than
    // SESSION_CACHE_MS. Exact, not a margin: the only lookup that can be remembered as live was
    // made (and its entry dated) before revokedAt was read, and a request asked at askedAt checks
    // the entry at askedAt or later; so a 200 means askedAt < revokedAt + SESSION_CACHE_MS however
    // long the request itself took on a busy machine.
    for (;;) {
      const askedAt = Date.now();
      const res = await t.app.inject({ method: 'GET', url: '/me', headers: s.auth });
      if (res.statusCode === 401) break;
      expect(res.statusCode).toBe(200);
      expect(askedAt - revokedAt).toBeLessThan(SESSION_CACHE_MS);
      await new Promise((r) => setTimeout(r, 50));
    }
  });
});

describe('rate limiting', () => {
  it('answers 429 after repeated login attempts from one address', async () => {
    const limited = await buildTestApp(t.db, { RATE_LIMIT_AUTH_PER_MINUTE: '3' });
    try {
      const codes: number[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await limited.app.inject({
          method: 'POST',
          url: '/auth/login',
          payload: { email: uniqueEmail(), password: 'wrong password' },
        });
        codes.push(res.statusCode);
        if (res.statusCode === 429) expect(res.json().code).toBe('rate_limited');
      }
      expect(codes).toEqual([401, 401, 401, 429, 429]);
    } finally {
      await limited.app.close();
    }
  });
});
