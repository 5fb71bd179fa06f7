import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { sql } from 'drizzle-orm';
import type { FastifyInstance } from 'fastify';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, type Config } from '../../../src/config.ts';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import type { Pooler } from '../../../src/db/pooler.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { buildApp } from '../../../src/http/app.ts';
import { createMailer } from '../../../src/mail/mailer.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../../../src/search/postgres-search-index.ts';
import { defaultHandlers } from '../../../src/worker/handlers/index.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { migrateCommand } from '../../../src/commands/migrate.ts';
import { seedCommand } from '../../../src/commands/seed.ts';
import { daysFromNow, listProperty, signUp, type Session } from '../../helpers/app.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { ROOT, runInProcess } from '../../helpers/npm-run.ts';
import { eventsEnv, freshStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { skipWithout } from '../../helpers/tools.ts';
import { PGBOUNCER_INSTALL, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.ts';
import { startSmtpServer, type TestSmtpServer } from '../../helpers/smtp.ts';

/*
 * StayHub behind a real PgBouncer (test/helpers/pgbouncer.ts), in session mode and in transaction
 * mode: the API's pools, the worker's handler pools and the earnings consumer go through it; the
 * worker's claim goes straight to PostgreSQL. PgBouncer refuses every startup parameter but a few
 * (application_name among them) in both modes, and in transaction mode hands consecutive
 * statements to whichever server connection is free, so a named statement prepared on one is
 * missing or already there on the next. Transaction mode gets fewer server connections than the
 * API has clients, as a pooler in front of many API processes would.
 */

const skip = skipWithout('pgbouncer', ['--version'], PGBOUNCER_INSTALL) || skipWithoutNats();
const nats = useNats(skip);
const silent = pino({ level: 'silent' });

describe.skipIf(skip).each<Pooler>(['session', 'transaction'])('StayHub through PgBouncer in %s mode', (mode) => {
  let tdb: TestDatabase;
  let bouncer: PgBouncer;
  let smtp: TestSmtpServer;
  let env: Record<string, string>;
  let config: Config;
  let api: Database;
  let app: FastifyInstance;
  let host: Session;
  let guest: Session;
  let propertyId: string;
  /** The bookings confirmed and not cancelled, and those cancelled, by the tests below. */
  const confirmed = new Set<string>();
  const cancelled = new Set<string>();

  beforeAll(async () => {
    tdb = await createTestDatabase('pooler');
    bouncer = await startPgBouncer(
      tdb.url,
      // A session holds its server connection until the client leaves: room for every client.
      mode === 'session' ? { pool_mode: 'session', default_pool_size: 40 } : { pool_mode: 'transaction', default_pool_size: 3 },
    );
    smtp = await startSmtpServer();
    env = eventsEnv(bouncer.url(tdb.url), nats.url, freshStream('POOL'), {
      DATABASE_POOLER: mode,
      SMTP_URL: smtp.url,
      RATE_LIMIT_AUTH_PER_MINUTE: '100000',
      // The API runs in this test process, whose event loop and pools the suite shares: admission
      // would judge the test runner's load, not the pooler's (as testConfig, test/helpers/app.ts).
      LOAD_SHEDDING: 'false',
    });
    config = loadConfig(env);
    api = createDatabase(config.DATABASE_URL, { max: 10, applicationName: 'stayhub-api', pooler: mode });
    // Without a search index of its own, the app opens one on the search pool settings: through PgBouncer too.
    app = await buildApp({ config, logger: silent, db: api });
    await app.ready();
    [host, guest] = await Promise.all([signUp(app, 'host'), signUp(app, 'guest')]);
    propertyId = (await listProperty(app, host, { title: 'Pooled loft', city: 'Lisbon', country: 'PT' })).id;
  });
  afterAll(async () => {
    await app?.close();
    await api?.close();
    await smtp?.close();
    await bouncer?.stop();
    await tdb?.drop();
  });

  const bookStay = (inDays: number, nights: number, headers: Record<string, string> = {}) =>
    app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guest.auth, ...headers },
      payload: { propertyId, checkIn: daysFromNow(inDays), checkOut: daysFromNow(inDays + nights), guests: 1 },
    });

  it('names itself to PostgreSQL through the pooler (application_name is the startup parameter it accepts)', async () => {
    const { rows } = await api.pool.query<{ name: string }>(`select current_setting('application_name') as name`);
    expect(rows).toEqual([{ name: 'stayhub-api' }]);
  });

  it('60 bookings at once, two for each stay: one 201 and one 409 each, never a 500', async () => {
    // 30 stays of two nights, end to end, each asked for twice at the same moment.
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => bookStay(10 + 2 * (i % 30), 2)));
    const byStatus = new Map<number, number>();
    for (const a of answers) byStatus.set(a.statusCode, (byStatus.get(a.statusCode) ?? 0) + 1);
    expect(Object.fromEntries(byStatus)).toEqual({ 201: 30, 409: 30 });
    for (const a of answers) if (a.statusCode === 201) confirmed.add(a.json<{ id: string }>().id);
    expect(confirmed.size).toBe(30);
  });

  it('replays an Idempotency-Key: the same booking, not a second one', async () => {
    const headers = { 'idempotency-key': `pooled-${mode}` };
    const first = await bookStay(200, 3, headers);
    expect(first.statusCode).toBe(201);
    const replays = await Promise.all(Array.from({ length: 5 }, () => bookStay(200, 3, headers)));
    for (const r of replays) {
      expect(r.statusCode).toBe(201);
      expect(r.headers['idempotent-replayed']).toBe('true');
      expect(r.json()).toEqual(first.json());
    }
    confirmed.add(first.json<{ id: string }>().id);
  });

  it('cancels, and the dates freed can be booked again', async () => {
    const some = [...confirmed].slice(0, 10);
    const cancel = (id: string) => app.inject({ method: 'POST', url: `/bookings/${id}/cancel`, headers: guest.auth });
    const answers = await Promise.all(some.map(cancel));
    expect(answers.map((a) => a.statusCode)).toEqual(some.map(() => 200));
    expect((await Promise.all(some.map(cancel))).map((a) => a.statusCode)).toEqual(some.map(() => 200));
    for (const id of some) {
      confirmed.delete(id);
      cancelled.add(id);
    }
    const { rows } = await tdb.pool.query<{ in_days: number }>(
      `select check_in - current_date as in_days from bookings where public_id = any($1::uuid[])`,
      [some],
    );
    const again = await Promise.all(rows.map((r) => bookStay(r.in_days, 2)));
    expect(again.map((a) => a.statusCode)).toEqual(rows.map(() => 201));
    for (const a of again) confirmed.add(a.json<{ id: string }>().id);
  });

  it('the worker, its claim direct and its handlers through the pooler: emails sent, search index written', async () => {
    const deps = {
      config,
      db: api.db,
      mailer: createMailer(config),
      logger: silent,
      searchIndex: createPostgresSearchIndex({ ...searchIndexOptions(config), applicationName: 'stayhub-worker-search' }),
    };
    const registry = new HandlerRegistry(defaultHandlers(deps));
    try {
      await registry.prepare(); // the events relay's stream
      const worker = createConfiguredWorker({ db: tdb.db, config, registry, logger: silent });
      await worker.runUntilEmpty();
    } finally {
      await registry.close();
      deps.mailer.close();
      await deps.searchIndex.close();
    }
    const { rows: outbox } = await tdb.pool.query<{ status: string; n: number }>(
      `select status, count(*)::int as n from outbox group by status`,
    );
    expect(outbox).toEqual([{ status: 'DONE', n: expect.any(Number) }]);
    // A confirmation to the guest and a notice to the host for each booking ever confirmed; a
    // cancellation notice to each for each cancelled.
    const made = confirmed.size + cancelled.size;
    expect(smtp.received).toHaveLength(2 * made + 2 * cancelled.size);

    const found = await app.inject({ method: 'GET', url: '/search?q=pooled&city=Lisbon' });
    expect(found.statusCode).toBe(200);
    expect(found.json<{ items: { property: { id: string } }[] }>().items.map((i) => i.property.id)).toEqual([propertyId]);
  });

  it('the search index cuts a statement off at SEARCH_STATEMENT_TIMEOUT_MS through the pooler', async () => {
    const index = createPostgresSearchIndex({ ...searchIndexOptions(config), statementTimeoutMs: 300 });
    const locker = new pg.Client({ connectionString: tdb.url });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query('lock table search_documents in access exclusive mode');
      const failure = await index.count().catch((e: unknown) => e);
      expect(failure).toMatchObject({ cause: { code: '57014' } }); // query_canceled: statement timeout
    } finally {
      await locker.query('rollback');
      await locker.end();
      await index.close();
    }
  });

  it('the earnings consumer through the pooler counts every booking once', async () => {
    const lines: string[] = [];
    const code = await earningsMain({
      argv: ['--until-empty'],
      env,
      out: (l) => lines.push(l),
      err: (l) => lines.push(l),
      exitOnForcedStop: false,
    });
    expect({ code, lines }).toEqual({ code: 0, lines: expect.any(Array) });
    const { rows } = await tdb.db.execute(sql`
      select bookings, cancellations from host_earnings h join users u on u.id = h.host_id where u.public_id = ${host.user.id}`);
    expect(rows).toEqual([{ bookings: confirmed.size + cancelled.size, cancellations: cancelled.size }]);
  });

  it(
    mode === 'transaction'
      ? 'the worker, migrate and seed refuse to start behind it, in one line that says what to do'
      : 'the whole worker runs through it',
    async () => {
      const err: string[] = [];
      const code = await drainOutbox({ argv: ['--until-empty'], env, out: () => {}, err: (l) => err.push(l), exitOnForcedStop: false });
      if (mode === 'session') return expect({ code, err }).toEqual({ code: 0, err: [] });
      const refusal =
        /^[a-z-]+: invalid configuration: DATABASE_POOLER=transaction: .+ cannot run through a transaction-mode pooler .*Connect it to PostgreSQL directly .* or through a session-mode pool/;
      expect({ code, err }).toEqual({ code: 2, err: [expect.stringMatching(refusal)] });
      for (const command of [migrateCommand, seedCommand]) {
        const run = await runInProcess(command, [], env);
        expect({ name: command.name, code: run.code, stderr: run.stderr }).toEqual({
          name: command.name,
          code: 2,
          stderr: expect.stringMatching(new RegExp(`${refusal.source}.*\\n$`)),
        });
        expect(run.stderr.trim().split('\n')).toHaveLength(1);
      }
    },
  );
});

describe('docker-compose.yml behind PgBouncer', () => {
  const compose = parse(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<string, { environment?: Record<string, string>; volumes?: string[]; depends_on?: Record<string, unknown> }>;
  };
  const env = (service: string) => compose.services[service]!.environment!;
  const hostOf = (service: string) => new URL(env(service).DATABASE_URL!).host;

  it('runs PgBouncer in transaction mode in front of postgres, from pgbouncer/pgbouncer.ini', () => {
    const bouncer = compose.services.pgbouncer!;
    expect(bouncer.volumes).toContain('./pgbouncer/pgbouncer.ini:/etc/pgbouncer/pgbouncer.ini:ro');
    const ini = readFileSync(path.join(ROOT, 'pgbouncer/pgbouncer.ini'), 'utf8');
    expect(ini).toMatch(/^pool_mode = transaction$/m);
    expect(ini).toMatch(/^stayhub = host=postgres port=5432 dbname=stayhub$/m);
  });

  it('sends the API through it with DATABASE_POOLER=transaction, and the worker and the migration to postgres', () => {
    expect({ host: hostOf('api'), pooler: env('api').DATABASE_POOLER }).toEqual({ host: 'pgbouncer:6432', pooler: 'transaction' });
    expect(compose.services.api!.depends_on).toHaveProperty('pgbouncer');
    for (const direct of ['worker', 'migrate']) {
      expect({ direct, host: hostOf(direct), pooler: env(direct).DATABASE_POOLER ?? 'none' }).toEqual({
        direct,
        host: 'postgres:5432',
        pooler: 'none',
      });
    }
  });
});

describe('DATABASE_POOLER', () => {
  it('is none by default, and a value other than none, session or transaction is refused by name', () => {
    expect(loadConfig({}).DATABASE_POOLER).toBe('none');
    expect(loadConfig({ DATABASE_POOLER: 'session' }).DATABASE_POOLER).toBe('session');
    const refused = (() => {
      try {
        return loadConfig({ DATABASE_POOLER: 'pgbouncer' });
      } catch (e) {
        return e;
      }
    })();
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as ConfigError).problems).toEqual([expect.stringMatching(/^DATABASE_POOLER: /)]);
  });
});
