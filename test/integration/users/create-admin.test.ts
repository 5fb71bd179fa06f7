import { describe, expect, it } from 'vitest';
import { uniqueEmail, useTestApp } from '../../helpers/app.ts';
import { runScript } from '../../helpers/npm-run.ts';

/*
 * `npm run create-admin` as a real process against a real database: the password comes from
 * stdin (a pipe here; a TTY prompt without echo for a person), never from a flag.
 */

const t = useTestApp();

const createAdmin = (args: string[], stdin: string, databaseUrl = t.db.url) =>
  runScript('src/commands/create-admin.ts', args, { ...process.env, DATABASE_URL: databaseUrl }, stdin);

describe('npm run create-admin', () => {
  it('creates an admin who signs in like everyone else and reaches the admin API', async () => {
    const email = uniqueEmail('ops');
    const r = await createAdmin(['--email', email, '--name', 'Olga Ops'], 'a long enough secret\n');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^created admin [0-9a-f-]{36}/);
    expect(r.stdout + r.stderr).not.toContain('a long enough secret');

    const login = await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'a long enough secret' } });
    expect(login.statusCode, login.body).toBe(200);
    expect(login.json().user).toMatchObject({ email, name: 'Olga Ops', role: 'admin' });
    const stats = await t.app.inject({
      method: 'GET',
      url: '/admin/outbox/stats',
      headers: { authorization: `Bearer ${login.json().token}` },
    });
    expect(stats.statusCode).toBe(200);

    const again = await createAdmin(['--email', email.toUpperCase(), '--name', 'Twice'], 'another long secret\n');
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already exists/);
  });

  it('refuses a password flag, a short password, a bad email and missing flags, creating nobody', { timeout: 60_000 }, async () => {
    const { rows: before } = await t.db.pool.query(`select count(*)::int as n from users`);
    const email = uniqueEmail('ops');
    const cases = [
      { args: ['--email', email, '--name', 'X', '--password', 'a long enough secret'], stdin: '', err: /not taken as a flag/ },
      { args: ['--email', email, '--name', 'X', '--password=a long enough secret'], stdin: '', err: /not taken as a flag/ },
      { args: ['--email', email, '--name', 'X'], stdin: 'short\n', err: /at least 10 characters/ },
      { args: ['--email', 'not-an-email', '--name', 'X'], stdin: 'a long enough secret\n', err: /email/ },
      { args: ['--name', 'X'], stdin: 'a long enough secret\n', err: /--email and --name are required/ },
    ];
    const results = await Promise.all(cases.map((c) => createAdmin(c.args, c.stdin)));
    for (const [i, r] of results.entries()) {
      expect(r.code, JSON.stringify(cases[i]!.args)).toBe(2);
      expect(r.stderr).toMatch(cases[i]!.err);
    }
    const { rows: after } = await t.db.pool.query(`select count(*)::int as n from users`);
    expect(after[0].n).toBe(before[0].n);
  });

  it('says the database is unreachable without echoing the query (it carries the password hash)', async () => {
    const r = await createAdmin(
      ['--email', uniqueEmail('ops'), '--name', 'X'],
      'a long enough secret\n',
      'postgres://postgres:x@127.0.0.1:1/none',
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/could not write to the database \(ECONNREFUSED\)/);
    expect(r.stderr).not.toMatch(/scrypt|insert into/i);
  });
});
