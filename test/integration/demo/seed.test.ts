import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEMO_BOOKINGS,
  DEMO_PASSWORD,
  DEMO_PROPERTIES,
  DEMO_USERS,
  NonDemoDataError,
  seedDemo,
  type SeedDeps,
} from '../../../src/demo/seed.ts';
import { createBooking } from '../../../src/bookings/booking.service.ts';
import { createProperty } from '../../../src/properties/properties.service.ts';
import { createUser } from '../../../src/users/auth.service.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { buildTestApp, signUp, type TestApp } from '../../helpers/app.ts';
import { createTestDatabase, tableCounts, type TestDatabase } from '../../helpers/db.ts';
import { runScript } from '../../helpers/npm-run.ts';

/*
 * `npm run seed`: demo data through the service layer (so the outbox carries its events), twice
 * gives the same database as once, and a database with somebody else's data is left alone.
 */

const mailDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-seed-mail-'));
let db: TestDatabase;
let other: TestDatabase;
let app: TestApp | undefined;
const deps = (d: TestDatabase): SeedDeps => ({ db: d.db, serviceFeePercent: 12, idempotencyTtlHours: 24 });

beforeAll(async () => {
  [db, other] = await Promise.all([createTestDatabase(), createTestDatabase()]);
});
afterAll(async () => {
  await app?.app.close();
  await db?.drop();
  await other?.drop();
  rmSync(mailDir, { recursive: true, force: true });
});

async function outboxByTopic(d: TestDatabase) {
  const { rows } = await d.pool.query<{ topic: string; n: number }>(
    'select topic, count(*)::int as n from outbox group by topic order by topic',
  );
  return Object.fromEntries(rows.map((r) => [r.topic, r.n]));
}

const runSeed = (d: TestDatabase, args: string[] = []) =>
  runScript('src/commands/seed.ts', args, { ...process.env, ENV_FILE: '', DATABASE_URL: d.url, LOG_LEVEL: 'warn' });

describe('npm run seed', () => {
  it('creates the demo accounts, a dozen properties, bookings and one cancellation, with their outbox rows', async () => {
    const first = await seedDemo(deps(db));
    expect(first.created).toEqual({ users: 3, properties: DEMO_PROPERTIES.length, bookings: DEMO_BOOKINGS.length, cancellations: 1 });
    expect(DEMO_PROPERTIES.length).toBeGreaterThanOrEqual(12);
    expect(new Set(DEMO_PROPERTIES.map((p) => p.city)).size).toBeGreaterThanOrEqual(3);
    expect(first.accounts.map((a) => a.role).sort()).toEqual(['admin', 'guest', 'host']);
    const { rows } = await db.pool.query<{ status: string; n: number }>(
      'select status, count(*)::int as n from bookings group by status order by status',
    );
    expect(rows).toEqual([
      { status: 'cancelled', n: 1 },
      { status: 'confirmed', n: DEMO_BOOKINGS.length - 1 },
    ]);
    // The service layer wrote the events: one per property, per booking, and the cancellation.
    expect(await outboxByTopic(db)).toEqual({
      'booking.cancelled': 1,
      'booking.created': DEMO_BOOKINGS.length,
      'property.changed': DEMO_PROPERTIES.length,
    });
  });

  it('a second run adds nothing', async () => {
    const before = await tableCounts(db);
    const second = await seedDemo(deps(db));
    expect(second.created).toEqual({ users: 0, properties: 0, bookings: 0, cancellations: 0 });
    expect(await tableCounts(db)).toEqual(before);
    // …and so does the script, which says so
    const script = await runSeed(db);
    expect(script.code).toBe(0);
    expect(script.stdout).toContain('nothing added');
    for (const u of DEMO_USERS) expect(script.stdout).toContain(u.email);
    expect(script.stdout).toContain(`password: ${DEMO_PASSWORD}`);
    expect(await tableCounts(db)).toEqual(before);
  });

  it('once the worker has run: search finds the properties, emails are written, the dashboard has numbers', async () => {
    const code = await drainOutbox({
      argv: ['--until-empty'],
      env: { DATABASE_URL: db.url, LOG_LEVEL: 'silent', MAIL_DIR: mailDir, ENV_FILE: '' },
      out: () => {},
    });
    expect(code).toBe(0);
    // booking.created emails the guest and the host; booking.cancelled too
    expect(readdirSync(mailDir).filter((f) => f.endsWith('.eml')).length).toBe(2 * (DEMO_BOOKINGS.length + 1));

    app = await buildTestApp(db);
    const lisbon = await app.app.inject({ method: 'GET', url: '/search?city=Lisbon' });
    expect(lisbon.statusCode).toBe(200);
    expect(lisbon.json().items).toHaveLength(DEMO_PROPERTIES.filter((p) => p.city === 'Lisbon').length);

    const admin = DEMO_USERS.find((u) => u.role === 'admin')!;
    const login = await app.app.inject({ method: 'POST', url: '/auth/login', payload: { email: admin.email, password: DEMO_PASSWORD } });
    expect(login.statusCode).toBe(200);
    const stats = await app.app.inject({
      method: 'GET',
      url: '/admin/outbox/stats',
      headers: { authorization: `Bearer ${login.json().token}` },
    });
    expect(stats.statusCode).toBe(200);
    expect(stats.json().doneLastHour).toBe(1 + DEMO_BOOKINGS.length + DEMO_PROPERTIES.length);
  });

  it('refuses a database that holds non-demo data, writing nothing, unless --force', async () => {
    const otherApp = await buildTestApp(other);
    try {
      await signUp(otherApp.app, 'host', 'A real host');
      const before = await tableCounts(other);
      await expect(seedDemo(deps(other))).rejects.toBeInstanceOf(NonDemoDataError);
      expect(await tableCounts(other)).toEqual(before);

      const refused = await runSeed(other);
      expect(refused.code).toBe(3);
      expect(refused.stderr).toMatch(/refused: .*1 user.*--force/s);
      expect(await tableCounts(other)).toEqual(before);

      const forced = await runSeed(other, ['--force']);
      expect(forced.code).toBe(0);
      expect((await tableCounts(other)).properties).toBe(before.properties! + DEMO_PROPERTIES.length);
    } finally {
      await otherApp.app.close();
    }
  });

  it('skips a planned booking whose dates a demo user already took, and books the rest', async () => {
    const third = await createTestDatabase();
    try {
      const today = () => '2030-01-01';
      const d = { ...deps(third), today };
      // Someone trying the demo: the demo host's property exists, and another demo guest booked
      // the first planned stay's dates before the seed ran.
      const planned = DEMO_BOOKINGS[0];
      const host = await createUser(third.db, { ...DEMO_USERS[0], password: DEMO_PASSWORD });
      const spec = DEMO_PROPERTIES.find((p) => p.title === planned.title)!;
      const property = await createProperty({ db: third.db }, host, { ...spec, active: true });
      const early = await createUser(third.db, { email: 'early@demo.stayhub.test', name: 'Early', role: 'guest', password: DEMO_PASSWORD });
      const checkIn = new Date(Date.UTC(2030, 0, 1 + planned.inDays)).toISOString().slice(0, 10);
      await createBooking(d, early, {
        propertyId: property.id,
        checkIn,
        checkOut: new Date(Date.UTC(2030, 0, 1 + planned.inDays + 1)).toISOString().slice(0, 10),
        guests: 1,
      });

      const result = await seedDemo(d);
      expect(result.created.bookings).toBe(DEMO_BOOKINGS.length - 1);
      expect(result.created.properties).toBe(DEMO_PROPERTIES.length - 1);
      expect((await tableCounts(third)).bookings).toBe(DEMO_BOOKINGS.length); // theirs + ours minus the clash
      expect((await seedDemo(d)).created).toEqual({ users: 0, properties: 0, bookings: 0, cancellations: 0 });
    } finally {
      await third.drop();
    }
  });
});
