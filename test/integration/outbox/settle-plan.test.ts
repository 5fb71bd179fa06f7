import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import {
  claimOn,
  connectClaimClient,
  explainStatement,
  MARK_DONE,
  markDoneManyOn,
  PlannedConnection,
} from '../../../src/outbox/testing.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { getMessages, insertMessages } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The worker's batched writes of claimed rows (DONE, lease extension, hand-back) go on a
 * connection of their own with the claim's planner settings (src/outbox/claim-connection.ts,
 * PlannedConnection). The case: a day whose statistics say nothing is PENDING, then a flood; a DONE
 * batch of 1,600 planned on a plain connection reads the day's rows instead of probing each id.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('wsettleplan');
});
afterAll(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.pool.query('truncate outbox');
});

/** EXPLAIN (ANALYZE when asked, rolled back) of the DONE write for `claims`, as the worker sends it, on `c`. */
/** The DONE write's plan for these claims; `bounds`: the batch's created_at span as markDoneMany gives it, or none. */
const explainDone = (
  c: pg.ClientBase,
  claims: { id: number; claimId: string; createdAtMs: number }[],
  analyze: boolean,
  bounds = false,
) => {
  const at = claims.map((m) => m.createdAtMs);
  const [from, to] = bounds
    ? [new Date(Math.min(...at) - 1000).toISOString(), new Date(Math.max(...at) + 1000).toISOString()]
    : ['-infinity', 'infinity'];
  return explainStatement(c, MARK_DONE, [claims.map((m) => m.id), claims.map((m) => m.claimId), claims.map(() => null), from, to], {
    analyze,
  });
};

describe('the settle connection', () => {
  it('writes a DONE batch by primary-key probes where the statistics say nothing is PENDING', async () => {
    // Statistics from a quiet day (everything DONE), then a flood the planner does not know of.
    await tdb.pool.query(`insert into outbox (topic, payload, status) select 'test.t', '{}', 'DONE' from generate_series(1, 3000)`);
    await tdb.pool.query('vacuum analyze outbox');
    await tdb.pool.query(`insert into outbox (topic, payload) select 'test.t', '{}' from generate_series(1, 20000)`);
    const planned = await connectClaimClient({ connectionString: tdb.url });
    const plain = new pg.Client({ connectionString: tdb.url });
    await plain.connect();
    try {
      const claimed = await claimOn(planned, { limit: 1600, leaseSeconds: 60, claimId: randomUUID() });
      expect(claimed).toHaveLength(1600);

      // The case: without the settings, the day is read whole for every batch.
      expect(await explainDone(plain, claimed, false)).toMatch(/Seq Scan on outbox_/);

      const plan = await explainDone(planned, claimed, true);
      expect(plan).toMatch(/Index Scan using outbox_\w+_pkey on outbox_\w+ o_\d+ \(actual [^)]*loops=1600\)/);
      expect(plan).not.toMatch(/Seq Scan|Bitmap|Hash|Materialize|Memoize|Sort/);
      // Every day in sight is probed for each id without the batch's span of created_at, and with
      // it only today's: the week of days made ahead (tomorrow's included) is left out.
      const probedDays = (p: string) =>
        (p.match(/Index Scan using outbox_\w+_pkey on outbox_\w+ o_\d+ \(actual [^)]*loops=1600\)/g) ?? []).length;
      expect(probedDays(plan)).toBeGreaterThan(1);
      expect(probedDays(await explainDone(planned, claimed, true, true))).toBe(1);
      const held = await markDoneManyOn(
        planned,
        claimed.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: null })),
      );
      expect(held.every(Boolean)).toBe(true);
      const { rows } = await tdb.pool.query(`select count(*)::int as n from outbox where status = 'DONE'`);
      expect(rows[0].n).toBe(3000 + 1600);
    } finally {
      await planned.end();
      await plain.end();
    }
  });

  it("is the worker's own while it runs, with the claim's settings, and closed when it stops", async () => {
    const { logger } = captureLogger();
    const handled: string[] = [];
    const worker = createConfiguredWorker({
      db: tdb.db,
      config: workerConfig(tdb),
      registry: new HandlerRegistry([testHandler('h', 'test.settle', async (ctx) => void handled.push(ctx.messageId))]),
      logger,
      listen: false,
      housekeeping: false,
    });
    const settleConnections = async () =>
      (
        await tdb.pool.query(
          `select current_setting('enable_seqscan') as server, count(*)::int as n from pg_stat_activity
            where datname = current_database() and application_name like '%-settle'`,
        )
      ).rows[0];
    const messages = await insertMessages(tdb.db, [{ topic: 'test.settle' }, { topic: 'test.settle' }]);
    await worker.start();
    try {
      await waitFor(async () =>
        (
          await getMessages(
            tdb.db,
            messages.map((m) => m.id),
          )
        ).every((m) => m.status === 'DONE'),
      );
      expect(await settleConnections()).toEqual({ server: 'on', n: 1 });
    } finally {
      await worker.stop();
    }
    expect(handled).toHaveLength(2);
    // Closed: its backend leaves pg_stat_activity once it has seen the connection end.
    await waitFor(async () => (await settleConnections()).n === 0);
  });
});

describe('PlannedConnection', () => {
  it('applies the settings before the first statement and drops a connection whose statement failed', async () => {
    const opened: pg.Pool[] = [];
    const own = new PlannedConnection(tdb.db, { role: 'settle', onOpen: (pool) => opened.push(pool) });
    try {
      const first = await own.use(
        async (c) => (await c.query(`select current_setting('enable_seqscan') as v, pg_backend_pid() as pid`)).rows[0],
      );
      expect(first.v).toBe('off');
      await expect(own.use((c) => c.query('select 1/0'))).rejects.toThrow(/division by zero/);
      const after = await own.use(
        async (c) => (await c.query(`select current_setting('enable_seqscan') as v, pg_backend_pid() as pid`)).rows[0],
      );
      expect(after.v).toBe('off');
      expect(after.pid).not.toBe(first.pid);
      expect(opened).toHaveLength(1);
    } finally {
      await own.close();
    }
  });
});
