import pg from 'pg';
import { sql } from 'drizzle-orm';
import { Registry } from 'prom-client';
import { beforeEach, describe, expect, it } from 'vitest';
import { listPendingDetaches, partitionsReattached } from '../../../src/outbox/index.ts';
import { withTransaction } from '../../../src/db/transaction.ts';
import { registerOutboxGauges } from '../../../src/metrics/outbox-gauges.ts';
import {
  createWorker as createOutboxWorker,
  HandlerCatalogue,
  HandlerRegistry,
  purgeOutbox,
  housekeepOnce,
} from '../../../src/outbox/index.ts';
import { listOutboxPartitions } from '../../../src/outbox/testing.ts';
import { runnerSettings } from '../../../src/worker/outbox-worker.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { dayName, layOutPastDays, tableState } from '../../helpers/outbox-partitions.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { testHandler } from '../../helpers/test-handler.ts';

/*
 * A day of the outbox left half detached: `DETACH PARTITION … CONCURRENTLY` cancelled while it waited
 * for a reader (src/outbox/half-detached-days.ts, ADR 0043). The partition stays marked "detach pending":
 * new statements plan the outbox without it, so its day's writes are refused and its messages are
 * out of sight until the detach is finished. Today's day is given back by the first write that
 * misses it, any day within the retention by the housekeeping's next round; a day past it is the
 * purge's, which drops it only if it holds nothing the outbox owes.
 */

const tdb = useTestDatabase('detach');

beforeEach(async () => {
  await tdb.pool.query('truncate outbox');
  await layOutPastDays(tdb.pool, 12); // a partition per day: today's is a day of its own
});

/** Inserts a message of `ago` days back (0: now), as the API's writes do: created_at = now(). */
async function insert(opts: { status?: string; ago?: number; processedAgo?: number } = {}): Promise<number> {
  const { rows } = await tdb.pool.query<{ id: number }>(
    `insert into outbox (topic, payload, status, created_at, available_at, processed_at)
     values ('test.t', '{}', $1, now() - make_interval(days => $2), now() - make_interval(days => $2),
             case when $3::int is null then null else now() - make_interval(days => $3::int) end)
     returning id::int`,
    [opts.status ?? 'PENDING', opts.ago ?? 0, opts.processedAgo ?? null],
  );
  return rows[0]!.id;
}

/**
 * What a person (or a tool) with a reader in the way leaves behind: DETACH … CONCURRENTLY of `name`
 * waits in its second phase for a transaction that read the outbox, and is cancelled there.
 */
async function interruptDetach(name: string): Promise<void> {
  const reader = new pg.Client({ connectionString: tdb.url });
  const detacher = new pg.Client({ connectionString: tdb.url });
  await reader.connect();
  await detacher.connect();
  try {
    await reader.query('begin isolation level repeatable read');
    await reader.query('select count(*) from outbox');
    const pid = (await detacher.query<{ pid: number }>(`select pg_backend_pid() as pid`)).rows[0]!.pid;
    const detach = detacher.query(`alter table outbox detach partition ${name} concurrently`).then(
      () => 'finished',
      (err: Error) => err.message,
    );
    // Its first phase has committed (the partition is marked) and it waits for the reader.
    for (const until = Date.now() + 30_000; ; await new Promise((r) => setTimeout(r, 50))) {
      if (Date.now() > until) throw new Error('DETACH CONCURRENTLY never reached its second phase');
      const marked = (await listOutboxPartitions(tdb.pool)).find((p) => p.name === name)?.detachPending;
      const { rows } = await tdb.pool.query(`select wait_event_type from pg_stat_activity where pid = $1`, [pid]);
      if (marked && rows[0]?.wait_event_type === 'Lock') break;
    }
    await tdb.pool.query('select pg_cancel_backend($1)', [pid]);
    await reader.query('rollback');
    expect(await detach).toMatch(/cancel/);
  } finally {
    await reader.end();
    await detacher.end();
  }
  expect((await listPendingDetaches(tdb.pool)).map((p) => p.name)).toEqual([name]);
}

/** A write as the API makes it: one transaction through withTransaction. */
const write = () =>
  withTransaction(
    tdb.db,
    async (tx) =>
      (await tx.execute<{ id: number }>(sql`insert into outbox (topic, payload) values ('test.t', '{}') returning id::int`)).rows[0]!.id,
  );

describe("today's day left half detached", () => {
  it('the first write that misses gives it back and is made; the messages it held are in sight again', async () => {
    const before = await insert();
    await interruptDetach(dayName(0));
    // What every write met until someone finished the detach by hand:
    await expect(tdb.pool.query(`insert into outbox (topic, payload) values ('test.t', '{}')`)).rejects.toThrow(
      /no partition of relation "outbox"/,
    );
    expect((await tdb.pool.query(`select count(*)::int as n from outbox where id = $1`, [before])).rows[0].n).toBe(0);

    const reattachedBefore = partitionsReattached();
    const started = Date.now();
    const id = await write();
    const tookMs = Date.now() - started;
    expect(tookMs).toBeLessThan(5_000); // its lock_timeout: it did not wait for anything
    expect(partitionsReattached() - reattachedBefore).toBe(1);
    expect(await tableState(tdb.pool, dayName(0))).toBe('partition');
    expect(await listPendingDetaches(tdb.pool)).toEqual([]);
    const { rows } = await tdb.pool.query<{ id: number; part: string }>(
      `select id::int, tableoid::regclass::text as part from outbox order by id`,
    );
    expect(rows).toEqual([
      { id: before, part: dayName(0) },
      { id, part: dayName(0) },
    ]);
  });

  it('the housekeeping gives it back within one round, logs it and counts it; the gauge shows it until then', async () => {
    await insert();
    await interruptDetach(dayName(0));
    const registry = new Registry();
    registerOutboxGauges(registry, { db: tdb.db, catalogue: new HandlerCatalogue([]), cacheMs: 0 });
    const pendingGauge = async () => (await registry.getSingleMetric('stayhub_outbox_partitions_detach_pending')!.get()).values[0]?.value;
    expect(await pendingGauge()).toBe(1);

    const { logger, entries } = captureLogger();
    const counts = await housekeepOnce(tdb.db, { retentionDays: 7, log: logger });
    expect(counts.outboxPartitionsReattached).toBe(1);
    expect(entries().filter((e) => /half detached/.test(String(e.msg)))).toEqual([
      expect.objectContaining({ level: 40, tables: [dayName(0)] }),
    ]);
    expect(await pendingGauge()).toBe(0);
    expect(await tableState(tdb.pool, dayName(0))).toBe('partition');
    await tdb.pool.query(`insert into outbox (topic, payload) values ('test.t', '{}')`);
    expect((await tdb.pool.query(`select count(*)::int as n from outbox`)).rows[0].n).toBe(2);
  });

  it('a message its worker is handling when its day goes out of sight is settled once, not handled again', async () => {
    // What sent two emails twice with the same Message-ID: the handler ran, its DONE found no row
    // (a fenced settle takes that for a lease lost to another worker), and once the day was back
    // the message was PENDING under a lease that ran out, and was claimed and handled again.
    const id = await insert();
    let ran = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let began!: () => void;
    const running = new Promise<void>((r) => (began = r));
    const { logger, entries } = captureLogger();
    const worker = createOutboxWorker({
      ...runnerSettings(workerConfig(tdb)),
      db: tdb.db,
      registry: new HandlerRegistry([
        testHandler('h', 'test.t', async () => {
          ran++;
          began();
          await gate;
        }),
      ]),
      logger,
      listen: false,
      housekeeping: false,
    });
    try {
      const run = worker.runUntilEmpty();
      await running;
      await interruptDetach(dayName(0));
      release();
      await run;
    } finally {
      release();
      await worker.stop();
    }
    expect(ran).toBe(1);
    const { rows } = await tdb.pool.query(`select status, claim_id from outbox where id = $1`, [id]);
    expect(rows).toEqual([{ status: 'DONE', claim_id: null }]);
    expect(entries().filter((e) => /settle found its days half detached/.test(String(e.msg)))).toEqual([
      expect.objectContaining({ level: 40, tables: [dayName(0)] }),
    ]);
  });
});

describe('a day past the retention left half detached', () => {
  it('holding a PENDING message: finished and given back by the purge, never dropped', async () => {
    const pending = await insert({ ago: 10 });
    const done = await insert({ status: 'DONE', ago: 10, processedAgo: 10 });
    const day = dayName(-10);
    await interruptDetach(day);
    const purged = await purgeOutbox(tdb.db, { retentionDays: 7 });
    expect(purged.partitions.map((p) => p.name)).not.toContain(day);
    expect(purged.detached.reattached).toEqual([day]);
    expect(await tableState(tdb.pool, day)).toBe('partition');
    const { rows } = await tdb.pool.query<{ id: number }>(`select id::int from outbox where id = any($1) order by id`, [[pending, done]]);
    expect(rows.map((r) => r.id)).toEqual([pending, done]);
  });

  it('holding only old DONE rows: finished and dropped, as the purge meant', async () => {
    await insert({ status: 'DONE', ago: 10, processedAgo: 10 });
    const day = dayName(-10);
    await interruptDetach(day);
    const purged = await purgeOutbox(tdb.db, { retentionDays: 7 });
    expect(purged.partitions.map((p) => p.name)).toContain(day);
    expect(await tableState(tdb.pool, day)).toBe('absent');
  });
});
