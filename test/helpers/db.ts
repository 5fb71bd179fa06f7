import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, inject } from 'vitest';
import { createDatabase, type Database } from '../../src/db/client.ts';
import { registerOutboxHooks } from '../../src/outbox/index.ts';
import { countMessages } from '../../src/outbox/testing.ts';

export interface TestDatabase extends Database {
  name: string;
  url: string;
  /** Drops the database. Fails if anything still holds a connection: a leaked pool fails its test file. */
  drop(): Promise<void>;
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: inject('pgServerUrl') });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export function urlFor(database: string): string {
  const u = new URL(inject('pgServerUrl'));
  u.pathname = `/${database}`;
  return u.toString();
}

export interface TestDatabaseOptions {
  /**
   * lock_timeout (ms) for every connection of the pool, and so of the worker's claim connection
   * too (it copies the pool's connection string: src/outbox/claim-connection.ts). For tests of
   * concurrent claims: a claim that waits for a row lock instead of skipping it (SKIP LOCKED lost)
   * then fails with "canceling statement due to lock timeout" instead of hanging until the test's
   * timeout. `url` stays without it (a test's own clients may wait on purpose).
   */
  lockTimeoutMs?: number;
}

/**
 * A fresh, migrated database cloned from the template (milliseconds), with a pool on it. The
 * outbox's hooks are registered with src/db as every command of the application registers them
 * (src/process/run-main.ts), so a test's withTransaction and runMigrations behave as the product's.
 */
export async function createTestDatabase(prefix = 't', opts: TestDatabaseOptions = {}): Promise<TestDatabase> {
  registerOutboxHooks();
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`create database ${name} template ${inject('templateDb')}`));
  const url = urlFor(name);
  const poolUrl = new URL(url);
  if (opts.lockTimeoutMs !== undefined) poolUrl.searchParams.set('options', `-c lock_timeout=${opts.lockTimeoutMs}`);
  return testDatabaseOn(url, name, poolUrl.toString(), () =>
    admin(async (c) => {
      // Give connections closed a moment ago time to leave pg_stat_activity (a killed process's
      // backend finishes its statement first, which a loaded machine makes slow).
      for (const until = Date.now() + 30_000; Date.now() < until;) {
        const { rows } = await c.query('select count(*)::int as n from pg_stat_activity where datname = $1', [name]);
        if (rows[0].n === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const { rows } = await c.query('select application_name, state, query from pg_stat_activity where datname = $1', [name]);
      if (rows.length) {
        throw new Error(`test database ${name} still has ${rows.length} connection(s) open: ${JSON.stringify(rows)}`);
      }
      await c.query(`drop database ${name}`);
    }),
  );
}

/**
 * The tests' pool (10 connections, named stayhub-test) on the database `name` at `url`, as a
 * TestDatabase whose `drop` closes the pool, then runs `dropped` (drop the database, or stop the
 * server it has to itself). `poolUrl`: the pool's connection string, when it carries options.
 */
export function testDatabaseOn(url: string, name: string, poolUrl: string, dropped: () => Promise<void>): TestDatabase {
  const database = createDatabase(poolUrl, { max: 10, applicationName: 'stayhub-test' });
  return {
    ...database,
    name,
    url,
    async drop() {
      await database.close();
      await dropped();
    },
  };
}

/**
 * A test file's own database: created before its tests (the object returned is filled in then),
 * dropped after them (the drop fails if a connection leaked), and with `truncate` (a list of tables,
 * 'outbox, outbox_audit') emptied before each test.
 */
export function useTestDatabase(prefix: string, opts: TestDatabaseOptions & { truncate?: string } = {}): TestDatabase {
  const tdb = {} as TestDatabase;
  beforeAll(async () => {
    Object.assign(tdb, await createTestDatabase(prefix, opts));
  });
  afterAll(async () => {
    await tdb.drop?.();
  });
  if (opts.truncate) beforeEach(async () => void (await tdb.pool.query(`truncate ${opts.truncate}`)));
  return tdb;
}

/** Row counts of every table a request could write: compared before and after a rejected request. */
export async function tableCounts(db: Database): Promise<Record<string, number>> {
  const { rows } = await db.pool.query(`
    select (select count(*) from users)::int as users,
           (select count(*) from sessions)::int as sessions,
           (select count(*) from properties)::int as properties,
           (select count(*) from bookings)::int as bookings,
           (select count(*) from idempotency_keys)::int as idempotency_keys`);
  return { ...rows[0], outbox: await countMessages(db.pool) };
}
