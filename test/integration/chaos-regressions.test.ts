import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/client.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

/*
 * Regression tests for bugs the chaos run (npm run chaos) found. Each names the run's symptom.
 */

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('chaosreg');
});
afterAll(async () => {
  await db?.drop();
});

describe('connection killed while a client is checked out (chaos: pg_terminate_backend / Postgres restart)', () => {
  it('rejects the running query and raises no uncaught error event that would crash the process', async () => {
    const pool = createPool(db.url, { max: 1, applicationName: 'stayhub-checked-out' });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.prependListener('uncaughtException', onUncaught);
    try {
      const client = await pool.connect();
      const running = client.query('select pg_sleep(30)');
      for (let i = 0; i < 100; i++) {
        const { rowCount } = await db.pool.query(
          `select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'stayhub-checked-out' and query like '%pg_sleep(30)%'`,
        );
        if (rowCount) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      await expect(running).rejects.toMatchObject({ code: '57P01' });
      // The socket's end arrives after the error message: give it time to be emitted.
      await new Promise((r) => setTimeout(r, 300));
      client.release(new Error('connection lost'));
      expect(uncaught).toEqual([]);
      // The pool recovers: the broken client was discarded, a new connection works.
      const { rows } = await pool.query('select 1 as ok');
      expect(rows[0].ok).toBe(1);
    } finally {
      process.off('uncaughtException', onUncaught);
      await pool.end();
    }
  });
});
