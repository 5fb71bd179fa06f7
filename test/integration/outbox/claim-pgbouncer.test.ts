import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import { CLAIM_STATEMENT, PLANNED_SESSION_SETTINGS, ClaimConnection, SessionSettingsError } from '../../../src/outbox/testing.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { skipWithout } from '../../helpers/tools.ts';
import { PGBOUNCER_INSTALL, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';

/*
 * The worker's claim connection behind a real PgBouncer (test/helpers/pgbouncer.ts) in front of
 * the test's embedded PostgreSQL. In session mode PgBouncer refuses the `options` startup parameter
 * (or, told to ignore it, drops it): the claim's planner settings must arrive by SET and hold. In
 * transaction mode they cannot hold, and the claim connection must say so instead of claiming
 * with the server's planner.
 */

const skip = skipWithout('pgbouncer', ['--version'], PGBOUNCER_INSTALL);
const bouncers: PgBouncer[] = [];
let tdb: TestDatabase;

beforeAll(async () => {
  if (skip) return;
  tdb = await createTestDatabase('bouncer');
});
afterAll(async () => {
  for (const b of bouncers) await b.stop();
  await tdb?.drop();
});

/** Starts pgbouncer with `settings` in front of the test database's server; returns a URL of the test database through it. */
async function startBouncer(settings: Record<string, string | number>): Promise<string> {
  const bouncer = await startPgBouncer(tdb.url, { max_client_conn: 50, ...settings });
  bouncers.push(bouncer);
  return bouncer.url(tdb.url);
}

/** A database and a claim connection through `url`, closed after `fn`. */
async function throughBouncer<T>(
  url: string,
  fn: (claimer: ClaimConnection, opened: pg.Pool[], database: Database) => Promise<T>,
): Promise<T> {
  const database = createDatabase(url, { max: 2, applicationName: 'stayhub-bouncer-test' });
  const opened: pg.Pool[] = [];
  const claimer = new ClaimConnection(database.db, { onOpen: (pool) => opened.push(pool) });
  try {
    return await fn(claimer, opened, database);
  } finally {
    await claimer.close();
    await database.close();
  }
}

const claim = (c: ClaimConnection, limit = 10) => c.claimBatch({ limit, leaseSeconds: 60, claimId: randomUUID() });

async function sessionSettings(q: pg.Pool): Promise<Record<string, string>> {
  const { rows } = await q.query<{ name: string; value: string }>(
    'select name, current_setting(name) as value from unnest($1::text[]) as name',
    [Object.keys(PLANNED_SESSION_SETTINGS)],
  );
  return Object.fromEntries(rows.map((r) => [r.name, r.value]));
}

describe.skipIf(skip)('the claim connection behind PgBouncer', () => {
  it('session mode: claims with its settings in force and its plan cached, where a startup `options` is refused', async () => {
    const url = await startBouncer({ pool_mode: 'session' });
    // What the claim connection sent before: PgBouncer answers 08P01.
    const withOptions = new pg.Client({ connectionString: url, options: '-c enable_seqscan=off' });
    const refused = await withOptions.connect().then(
      () => undefined,
      (e: { code?: string; message: string }) => e,
    );
    await withOptions.end().catch(() => undefined);
    expect(refused).toMatchObject({ code: '08P01', message: expect.stringMatching(/unsupported startup parameter: options/) });

    await tdb.db.execute(sql`truncate outbox`);
    const rows = await insertMessages(
      tdb.db,
      Array.from({ length: 25 }, () => ({ topic: 'test.t' })),
    );
    await throughBouncer(url, async (claimer, opened) => {
      const claimed = [...(await claim(claimer, 10)), ...(await claim(claimer, 10)), ...(await claim(claimer, 10))];
      expect(claimed.map((m) => m.id).sort((a, b) => a - b)).toEqual(rows.map((r) => r.id));
      expect(opened).toHaveLength(1);
      expect(await sessionSettings(opened[0]!)).toEqual({ ...PLANNED_SESSION_SETTINGS });
      // One server session throughout: the claim was planned once and run from its cached plan.
      const { rows: stmt } = await opened[0]!.query(
        `select generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements where name = $1`,
        [CLAIM_STATEMENT],
      );
      expect(stmt).toEqual([{ generic: 3, custom: 0 }]);
    });
  });

  it('session mode ignoring `options`: the settings still hold (they no longer travel in it)', async () => {
    const url = await startBouncer({ pool_mode: 'session', ignore_startup_parameters: 'options' });
    await tdb.db.execute(sql`truncate outbox`);
    await insertMessages(tdb.db, [{ topic: 'test.t' }]);
    await throughBouncer(url, async (claimer, opened) => {
      expect(await claim(claimer)).toHaveLength(1);
      expect(await sessionSettings(opened[0]!)).toEqual({ ...PLANNED_SESSION_SETTINGS });
    });
  });

  it('transaction mode: refuses to claim, saying the settings did not hold and why', async () => {
    // Two server connections used in turn: the SET lands on one, the read-back on the other.
    const url = await startBouncer({ pool_mode: 'transaction', server_round_robin: 1, default_pool_size: 2, min_pool_size: 2 });
    await tdb.db.execute(sql`truncate outbox`);
    await insertMessages(tdb.db, [{ topic: 'test.t' }]);
    // Both server connections opened (held at once) before the claim connection's first statement.
    const warm = Array.from({ length: 2 }, () => new pg.Client({ connectionString: url }));
    await Promise.all(warm.map((c) => c.connect()));
    await Promise.all(warm.map((c) => c.query('select pg_sleep(0.2)')));
    await Promise.all(warm.map((c) => c.end()));
    await throughBouncer(url, async (claimer) => {
      const failure = await claim(claimer).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(SessionSettingsError);
      expect((failure as Error).message).toMatch(/did not hold .*session connection/);
      // Nothing was claimed on it.
      const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where attempts > 0`);
      expect(rows[0]!.n).toBe(0);
    });
  });
});
