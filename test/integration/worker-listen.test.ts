import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { withTransaction } from '../../src/db/transaction.ts';
import { enqueue } from '../../src/outbox/enqueue.ts';
import { purgeDone } from '../../src/outbox/purge.ts';
import { createWorker } from '../../src/worker/loop.ts';
import { HandlerRegistry } from '../../src/worker/registry.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { bookingPayload, captureLogger, sleep, testHandler, waitFor, workerConfig } from '../helpers/worker.ts';

/*
 * Wake-up by LISTEN/NOTIFY (with the fallback poll set to a minute, only the notification can
 * explain a fast pick-up), the listener surviving its connection being killed, and housekeeping.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('wlisten');
});
afterAll(async () => {
  await tdb?.drop();
});

async function enqueueBooking() {
  const payload = bookingPayload();
  const committedAt = await withTransaction(tdb.db, async (tx) => {
    await enqueue(tx, 'booking.created', payload, { key: payload.bookingId });
    return () => performance.now();
  });
  return { payload, committedAt: committedAt() };
}

describe('LISTEN/NOTIFY', () => {
  it('handles a committed message within a second although the poll interval is a minute, and again after the listener connection is killed', async () => {
    const handledAt = new Map<string, number>();
    const { logger, entries } = captureLogger();
    const worker = createWorker({
      db: tdb.db,
      config: workerConfig(tdb, { POLL_INTERVAL_MS: '60000' }),
      registry: new HandlerRegistry([
        testHandler('record', 'booking.created', async ({ payload }) => {
          handledAt.set((payload as { bookingId: string }).bookingId, performance.now());
        }),
      ]),
      logger,
      purge: false,
    });
    try {
      await worker.start();
      await sleep(200); // the first (empty) claim is done; the loop now sleeps for a minute

      const first = await enqueueBooking();
      const t1 = await waitFor(async () => handledAt.get(first.payload.bookingId), 5000, 'first message handled');
      expect(t1 - first.committedAt).toBeLessThan(1000);

      // The database kills the listener's session (as on a restart or failover).
      const { rows } = await tdb.db.execute<{ pid: number }>(
        sql`select pid from pg_stat_activity where datname = current_database() and application_name = 'stayhub-worker-listen'`,
      );
      expect(rows).toHaveLength(1);
      await tdb.db.execute(sql`select pg_terminate_backend(${rows[0]!.pid})`);
      await waitFor(async () => {
        const r = await tdb.db.execute<{ pid: number }>(
          sql`select pid from pg_stat_activity where datname = current_database() and application_name = 'stayhub-worker-listen'`,
        );
        return r.rows.length === 1 && r.rows[0]!.pid !== rows[0]!.pid;
      }, 10_000, 'listener to reconnect');
      await sleep(100);

      const second = await enqueueBooking();
      const t2 = await waitFor(async () => handledAt.get(second.payload.bookingId), 5000, 'second message handled');
      expect(t2 - second.committedAt).toBeLessThan(1000);
      expect(entries().some((e) => e.msg === 'listener connection lost; reconnecting')).toBe(true);
    } finally {
      await worker.stop();
    }
  });

  it('a rolled-back enqueue wakes nobody and leaves nothing', async () => {
    await expect(
      withTransaction(tdb.db, async (tx) => {
        await enqueue(tx, 'booking.created', bookingPayload());
        throw new Error('rollback');
      }),
    ).rejects.toThrow('rollback');
    const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status = 'PENDING'`);
    expect(rows[0]!.n).toBe(0);
  });
});

describe('housekeeping', () => {
  it('purges DONE rows older than the retention in bounded batches, and nothing else', async () => {
    await tdb.db.execute(sql`truncate outbox`);
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at)
      select 't', '{}', 'DONE', now() - interval '8 days' from generate_series(1, 2500)`);
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at)
      values ('t', '{}', 'DONE', now() - interval '6 days'),
             ('t', '{}', 'DEAD', now() - interval '30 days'),
             ('t', '{}', 'PENDING', null)`);
    const statements: number[] = [];
    // One batch at a time, to see that no statement deletes more than the batch size.
    for (;;) {
      const n = await purgeDone(tdb.db, { retentionDays: 7, batchSize: 1000, maxBatches: 1 });
      statements.push(n);
      if (n < 1000) break;
    }
    expect(statements).toEqual([1000, 1000, 500]);
    const { rows } = await tdb.db.execute<{ status: string; n: number }>(
      sql`select status, count(*)::int as n from outbox group by status order by status`,
    );
    expect(rows).toEqual([
      { status: 'DEAD', n: 1 },
      { status: 'DONE', n: 1 },
      { status: 'PENDING', n: 1 },
    ]);
  });

  it('the running worker purges on its schedule', async () => {
    await tdb.db.execute(sql`truncate outbox`);
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at)
      select 't', '{}', 'DONE', now() - interval '2 days' from generate_series(1, 1500)`);
    const { logger } = captureLogger();
    const worker = createWorker({
      db: tdb.db,
      config: workerConfig(tdb, { OUTBOX_RETENTION_DAYS: '1' }),
      registry: new HandlerRegistry([]),
      logger,
      listen: false,
    });
    await worker.start();
    try {
      await waitFor(async () => worker.summary().purged === 1500, 5000, 'purge');
    } finally {
      await worker.stop();
    }
    const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox`);
    expect(rows[0]!.n).toBe(0);
  });
});
