import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, uniqueEmail, type TestApp } from '../../helpers/app.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * SIGNUPS_PER_ADDRESS_PER_DAY (ADR 0039): accounts made from one client address in a day. Every
 * account is an owner of its own in the outbox's turns, so this is what bounds how many owners one
 * person can bring. The per-minute limit is set out of the way here: only the daily cap answers.
 */

let tdb: TestDatabase;
let t: TestApp;
beforeAll(async () => {
  tdb = await createTestDatabase('signupcap');
  t = await buildTestApp(tdb, { SIGNUPS_PER_ADDRESS_PER_DAY: '3' });
});
afterAll(async () => {
  await t?.app.close();
  await tdb?.drop();
});

const register = (remoteAddress: string, payload: Record<string, unknown> = {}) =>
  t.app.inject({
    method: 'POST',
    url: '/auth/register',
    remoteAddress,
    payload: { email: uniqueEmail('cap'), password: 'long enough pw', name: 'Cap', role: 'host', ...payload },
  });

describe('accounts per address per day', () => {
  it('refuses the account past the cap with 429 and a retry in about a day; failed attempts do not count', async () => {
    const taken = uniqueEmail('taken');
    expect((await register('10.0.0.1', { email: taken })).statusCode).toBe(201);
    // A mistyped form and a taken email make no account, and cost nothing.
    for (let i = 0; i < 5; i++) {
      expect((await register('10.0.0.1', { email: 'not-an-email' })).statusCode).toBe(400);
      expect((await register('10.0.0.1', { email: taken })).statusCode).toBe(409);
    }
    expect((await register('10.0.0.1')).statusCode).toBe(201);
    expect((await register('10.0.0.1', { role: 'guest' })).statusCode).toBe(201);

    const refused = await register('10.0.0.1');
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(23 * 3600);
    const { rows } = await tdb.pool.query<{ n: number }>(`select count(*)::int as n from users where email like 'cap-%'`);
    expect(rows[0]!.n).toBe(2); // the two after `taken`, none past the cap

    // Another address has its own day; signing in is not a sign-up.
    expect((await register('10.0.0.2')).statusCode).toBe(201);
    const login = await t.app.inject({
      method: 'POST',
      url: '/auth/login',
      remoteAddress: '10.0.0.1',
      payload: { email: taken, password: 'long enough pw' },
    });
    expect(login.statusCode).toBe(200);
  });

  it('counts an IPv6 /64 as one address', async () => {
    for (let i = 1; i <= 3; i++) expect((await register(`2001:db8:1:2::${i}`)).statusCode).toBe(201);
    expect((await register('2001:db8:1:2:ffff::9')).statusCode).toBe(429);
    expect((await register('2001:db8:1:3::1')).statusCode).toBe(201);
  });
});
