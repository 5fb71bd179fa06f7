import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_PASSWORD, DEMO_USERS, DemoAccountTakenError, seedDemo } from '../../../src/demo/seed.ts';
import { buildTestApp, uniqueEmail, type TestApp } from '../../helpers/app.ts';
import { createTestDatabase, tableCounts, type TestDatabase } from '../../helpers/db.ts';
import { runScript } from '../../helpers/npm-run.ts';

/*
 * What people type into the two commands that create accounts by hand: `npm run seed` finding a
 * demo address someone registered before it, and `npm run create-admin` given a name with control
 * or invisible characters.
 */

let db: TestDatabase;
let app: TestApp;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await buildTestApp(db);
});
afterAll(async () => {
  await app?.app.close();
  await db?.drop();
});

const runSeed = (args: string[] = []) =>
  runScript('src/commands/seed.ts', args, { ...process.env, ENV_FILE: '', DATABASE_URL: db.url, LOG_LEVEL: 'warn' });

const register = (email: string, role: 'guest' | 'host', password: string) =>
  app.app.inject({ method: 'POST', url: '/auth/register', payload: { email, password, name: 'Early bird', role } });

describe('npm run seed and demo addresses registered before it', () => {
  it('refuses, writing nothing, when a demo address is someone else’s account; --force does not change that', async () => {
    const admin = DEMO_USERS.find((u) => u.key === 'admin')!;
    const host = DEMO_USERS.find((u) => u.key === 'host')!;
    // A guest took the demo admin's address; a host took the demo host's, with a password of their own.
    expect((await register(admin.email, 'guest', 'my own password 1')).statusCode).toBe(201);
    expect((await register(host.email, 'host', 'my own password 2')).statusCode).toBe(201);
    const before = await tableCounts(db);

    const failure = await seedDemo({ db: db.db, serviceFeePercent: 12, idempotencyTtlHours: 24 }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(DemoAccountTakenError);
    expect((failure as DemoAccountTakenError).accounts).toEqual([
      { email: host.email, problem: 'with another password than the demo one' },
      { email: admin.email, problem: 'as a guest, not the demo admin' },
    ]);

    for (const args of [[], ['--force']]) {
      const refused = await runSeed(args);
      expect(refused.code).toBe(3);
      expect(refused.stderr).toMatch(
        /^seed: refused: host@demo\.stayhub\.test is registered already, with another password .*admin@demo\.stayhub\.test is registered already, as a guest/,
      );
      expect(refused.stdout).not.toContain('password:'); // no account list printed
    }
    expect(await tableCounts(db)).toEqual(before);
    // Their accounts are as they made them.
    const login = await app.app.inject({
      method: 'POST',
      url: '/auth/login',
      payload: { email: admin.email, password: 'my own password 1' },
    });
    expect(login.json().user.role).toBe('guest');
    expect(
      (await app.app.inject({ method: 'POST', url: '/auth/login', payload: { email: admin.email, password: DEMO_PASSWORD } })).statusCode,
    ).toBe(401);
  });
});

const createAdmin = (args: string[], stdin: string) =>
  runScript('src/commands/create-admin.ts', args, { ...process.env, ENV_FILE: '', DATABASE_URL: db.url }, stdin);

describe('npm run create-admin and the name', () => {
  it.each([
    ['a newline', 'Olga\nAdmin: yes', /name must not contain control characters/],
    ['an ESC (terminal colours)', 'Olga \u001b[31mOps', /name must not contain control characters/],
    ['a right-to-left override', 'Olga\u202Espo', /name must not contain invisible or text-direction characters \(U\+202E\)/],
    ['a zero-width space', 'Ol\u200Bga', /name must not contain invisible or text-direction characters \(U\+200B\)/],
  ])('refuses a name with %s (exit 2), and creates nobody', async (_what, name, message) => {
    const email = uniqueEmail('ops');
    const r = await createAdmin(['--email', email, '--name', name], 'a long enough secret\n');
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(message);
    const { rows } = await db.pool.query('select 1 from users where lower(email) = lower($1)', [email]);
    expect(rows).toEqual([]);
  });

  it('still creates an admin with an ordinary name', async () => {
    const r = await createAdmin(['--email', uniqueEmail('ops'), '--name', 'Zoë Ødegård'], 'a long enough secret\n');
    expect(r.code, r.stderr).toBe(0);
  });
});
