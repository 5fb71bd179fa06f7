import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { CLAIM_PLANNER_SETTINGS, claimBatch, claimSql } from '../../src/outbox/claim.ts';
import * as settle from '../../src/outbox/settle.ts';
import { handBack } from '../../src/outbox/lease.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { getMessage, getMessages, insertMessage, insertMessages, makeDue } from '../helpers/worker.ts';

/*
 * The claim and settle statements on their own, against real Postgres: SKIP LOCKED, no double
 * claims under concurrency, per-key order, and fencing of late settles.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('wclaim');
});
afterAll(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.db.execute(sql`truncate outbox`);
});

const claim = (limit = 10, leaseSeconds = 60) => claimBatch(tdb.db, { limit, leaseSeconds, claimId: randomUUID() });

describe('claim', () => {
  it('skips rows another transaction holds locked, and does not wait for it (SKIP LOCKED)', async () => {
    const rows = await insertMessages(tdb.db, Array.from({ length: 10 }, () => ({ topic: 'test.t' })));
    const ids = rows.map((r) => r.id);
    const holder = new pg.Client({ connectionString: tdb.url });
    await holder.connect();
    try {
      await holder.query('begin');
      // Worker A's claim transaction, frozen in the middle: it holds the first five rows.
      await holder.query('select id from outbox where id = any($1) for update', [ids.slice(0, 5)]);

      let started = performance.now();
      const b = await claim(10);
      let elapsed = performance.now() - started;
      expect(b.map((m) => m.id).sort((x, y) => x - y)).toEqual(ids.slice(5));
      expect(elapsed, `worker B blocked for ${elapsed.toFixed(0)} ms: waiting, not skipping`).toBeLessThan(1000);

      // Everything left is either locked by A or leased by B: nothing, and at once.
      started = performance.now();
      expect(await claim(10)).toEqual([]);
      elapsed = performance.now() - started;
      expect(elapsed).toBeLessThan(1000);
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
    // A's rows are claimable once A is gone.
    expect((await claim(10)).map((m) => m.id).sort((x, y) => x - y)).toEqual(ids.slice(0, 5));
  });

  it('N claimers in parallel over 2,000 messages never claim one twice', async () => {
    await insertMessages(tdb.db, Array.from({ length: 2000 }, (_, i) => ({ topic: 'test.t', payload: { i } })));
    const claimers = 8;
    const seen: number[][] = await Promise.all(
      Array.from({ length: claimers }, async () => {
        const mine: number[] = [];
        for (;;) {
          const batch = await claim(25 + Math.floor(Math.random() * 50));
          if (batch.length === 0) return mine;
          mine.push(...batch.map((m) => m.id));
        }
      }),
    );
    const all = seen.flat();
    expect(new Set(all).size).toBe(all.length);
    expect(all.length).toBe(2000);
    // More than one claimer did real work (otherwise this proved nothing about concurrency).
    expect(seen.filter((s) => s.length > 0).length).toBeGreaterThan(1);
    const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where attempts <> 1 or claim_id is null`);
    expect(rows[0]!.n).toBe(0);
  });

  it('takes the lease: attempts counted, claim token set, hidden until the lease ends', async () => {
    const m = await insertMessage(tdb.db, 'test.t');
    const [c] = await claim(10, 30);
    expect(c).toMatchObject({ id: m.id, attempts: 1, handlersDone: [] });
    const row = await getMessage(tdb.db, m.id);
    expect(row.claim_id).toBe(c!.claimId);
    expect(row.scheduled_after_claim).toBe(30); // the lease: 30 s from the claim's own now()
    expect(row.due_in).toBeLessThanOrEqual(30);
    expect(await claim()).toEqual([]);
    await makeDue(tdb.db); // the lease runs out (the worker died)
    const [again] = await claim();
    expect(again).toMatchObject({ id: m.id, attempts: 2 });
    expect(again!.claimId).not.toBe(c!.claimId);
  });

  it('is planned afresh each time: empty polls never leave a generic plan behind for a burst', async () => {
    // One connection, so every claim below runs on it, as an idle worker's polls do.
    const one = new pg.Pool({ connectionString: tdb.url, max: 1 });
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const db = drizzle(one) as unknown as typeof tdb.db;
    try {
      for (let i = 0; i < 12; i++) await claimBatch(db, { limit: 500, leaseSeconds: 60, claimId: randomUUID() });
      await insertMessages(tdb.db, Array.from({ length: 50 }, () => ({ topic: 'test.t' })));
      expect(await claimBatch(db, { limit: 500, leaseSeconds: 60, claimId: randomUUID() })).toHaveLength(50);
      // PostgreSQL switches a prepared statement to a generic plan after five executions; a plan
      // made for an empty outbox then took 7.7 s per claim on a burst of 20,000 rows.
      const { rows } = await one.query(`select name, generic_plans from pg_prepared_statements where statement ilike '%for update skip locked%'`);
      expect(rows.filter((r) => Number(r.generic_plans) > 0)).toEqual([]);
    } finally {
      await one.end();
    }
  });

  it('keeps its plan whatever the statistics say: a burst after ANALYZE saw only DONE rows', async () => {
    // Statistics from a quiet outbox (everything DONE), then a burst the planner does not know of;
    // every tenth message shares a key with others, so the per-key check has work to do.
    await tdb.db.execute(sql`insert into outbox (topic, key, payload, status) select 'test.t', gen_random_uuid()::text, '{}', 'DONE' from generate_series(1, 3000)`);
    await tdb.db.execute(sql`vacuum analyze outbox`);
    await tdb.db.execute(
      sql`insert into outbox (topic, key, payload) select 'test.t', case when i % 10 = 0 then 'k' || (i % 7) else gen_random_uuid()::text end, '{}' from generate_series(1, 5000) i`,
    );
    const c = new pg.Client({ connectionString: tdb.url });
    await c.connect();
    try {
      // The case this is about: the planner believes a handful of rows are PENDING; 5,000 are.
      const { rows: est } = await c.query(`explain (format json) select id from outbox where status = 'PENDING'`);
      expect(est[0]['QUERY PLAN'][0].Plan['Plan Rows']).toBeLessThan(50);

      await c.query('begin');
      let picking: string;
      try {
        await c.query(CLAIM_PLANNER_SETTINGS);
        const { rows } = await c.query(`explain (analyze, costs off) ${claimSql(500, randomUUID(), 60)}`);
        const text = rows.map((r) => r['QUERY PLAN']).join('\n');
        picking = text.slice(text.indexOf('CTE due'), text.indexOf('CTE claimed')); // the part that picks the rows
      } finally {
        await c.query('rollback');
      }
      // The ordered walk of the pending index, stopped at the limit: no bitmap scan, no sort.
      const walked = picking.match(/Index Scan using outbox_pending_available_idx on outbox o \(actual [^)]*rows=(\d+)/);
      expect(Number(walked?.[1])).toBeGreaterThanOrEqual(500);
      expect(Number(walked?.[1])).toBeLessThan(1000); // of 5,000 pending
      expect(picking).not.toMatch(/Bitmap|Sort|Hash|Seq Scan/);
      // The per-key check probes the key index by key (an Index Cond), never a whole-index scan.
      expect(picking).toMatch(/Index Scan using outbox_key_idx on outbox e[^\n]*\n\s+Index Cond: \(\(key = o\.key\) AND \(id < o\.id\)\)/);

      // The worker's own claim, which sends those settings with it: the oldest 500 that no older
      // PENDING message of their key holds back.
      const { rows: expected } = await c.query(
        `select id::float8 from (select id, available_at, key, row_number() over (partition by key order by id) as nth from outbox where status = 'PENDING') p
          where key is null or nth = 1 order by available_at, id limit 500`,
      );
      const claimed = await claimBatch(tdb.db, { limit: 500, leaseSeconds: 60, claimId: randomUUID() });
      expect(claimed.map((m) => m.id)).toEqual(expected.map((r) => r.id));
      expect(claimed.filter((m) => m.key?.startsWith('k'))).toHaveLength(7);
    } finally {
      await c.end();
    }
  });

  it('keeps its plan on a table never analyzed: the ordered walk, not a bitmap scan and a sort of the whole burst', async () => {
    const fresh = await createTestDatabase('wclaimfresh');
    const c = new pg.Client({ connectionString: fresh.url });
    await c.connect();
    const picking = async (settings: boolean) => {
      await c.query('begin');
      try {
        if (settings) await c.query(CLAIM_PLANNER_SETTINGS);
        const { rows } = await c.query(`explain (costs off) ${claimSql(500, randomUUID(), 60)}`);
        const text = rows.map((r) => r['QUERY PLAN']).join('\n');
        return text.slice(text.indexOf('CTE due'), text.indexOf('CTE claimed'));
      } finally {
        await c.query('rollback');
      }
    };
    try {
      await c.query(`insert into outbox (topic, key, payload) select 'test.t', gen_random_uuid()::text, '{}' from generate_series(1, 20000)`);
      // The case: without the settings, the planner (guessing a few rows) sorts the whole burst.
      const stale = await picking(false);
      expect(stale).toMatch(/Bitmap Heap Scan on outbox o/);
      expect(stale).toMatch(/Sort/);
      const plan = await picking(true);
      expect(plan).toMatch(/Index Scan using outbox_pending_available_idx on outbox o/);
      expect(plan).not.toMatch(/Bitmap|Sort|Hash|Seq Scan/);
    } finally {
      await c.end();
      await fresh.drop();
    }
  });

  it('refuses values that are not a positive integer, a positive number and a uuid (they are inlined)', () => {
    expect(() => claimSql(0, randomUUID(), 60)).toThrow(/limit/);
    expect(() => claimSql(1.5, randomUUID(), 60)).toThrow(/limit/);
    expect(() => claimSql(10, randomUUID(), Number.NaN)).toThrow(/lease/);
    expect(() => claimSql(10, "x'; drop table outbox; --", 60)).toThrow(/uuid/);
    expect(claimSql(10, '00000000-0000-4000-8000-000000000000', 60)).toContain("'00000000-0000-4000-8000-000000000000'::uuid");
  });

  it('does not claim messages that are not due yet', async () => {
    const m = await insertMessage(tdb.db, 'test.t');
    await tdb.db.execute(sql`update outbox set available_at = now() + interval '5 seconds' where id = ${m.id}`);
    expect(await claim()).toEqual([]);
  });
});

describe('per-key order in the claim', () => {
  it('holds back a message while an older one of its key is pending (new, leased or backing off); other keys go ahead', async () => {
    const [a1, a2, b1, n1, n2] = await insertMessages(tdb.db, [
      { topic: 't', key: 'A' },
      { topic: 't', key: 'A' },
      { topic: 't', key: 'B' },
      { topic: 't', key: null },
      { topic: 't', key: null },
    ]);
    const first = await claim(10);
    // a2 waits for a1; messages without a key are not ordered.
    expect(first.map((m) => m.id).sort((x, y) => x - y)).toEqual([a1!.id, b1!.id, n1!.id, n2!.id]);

    // a1 leased: a2 still waits.
    expect(await claim(10)).toEqual([]);
    // a1 fails and backs off: a2 still waits (its confirmation has not gone yet).
    const c1 = first.find((m) => m.id === a1!.id)!;
    await settle.scheduleRetry(tdb.db, a1!.id, c1.claimId, 60, 'x');
    expect(await claim(10)).toEqual([]);
    // Its backoff over (time travel, not a sleep): a1 comes back, a2 still behind it.
    await makeDue(tdb.db, [a1!.id]);
    const second = await claim(10);
    expect(second.map((m) => m.id)).toEqual([a1!.id]);
    // a1 done: now a2.
    await settle.markDone(tdb.db, a1!.id, second[0]!.claimId);
    expect((await claim(10)).map((m) => m.id)).toEqual([a2!.id]);
  });

  it('a DEAD message does not block its key', async () => {
    const [a1, a2] = await insertMessages(tdb.db, [
      { topic: 't', key: 'A' },
      { topic: 't', key: 'A' },
    ]);
    const [c] = await claim(10);
    expect(c!.id).toBe(a1!.id);
    await settle.markDead(tdb.db, a1!.id, c!.claimId, 'h: PermanentError: no');
    expect((await claim(10)).map((m) => m.id)).toEqual([a2!.id]);
  });
});

describe('fencing', () => {
  it('a late worker settling after its lease was re-claimed changes nothing', async () => {
    const m = await insertMessage(tdb.db, 'test.t');
    const [late] = await claim(10, 1);
    await makeDue(tdb.db); // late's lease has run out…
    const [current] = await claim(10); // …and another worker claimed the message
    expect(current!.claimId).not.toBe(late!.claimId);
    const before = await getMessage(tdb.db, m.id);

    expect(await settle.recordHandlerDone(tdb.db, m.id, late!.claimId, 'h1')).toBe(false);
    expect(await settle.markDone(tdb.db, m.id, late!.claimId)).toBe(false);
    expect(await settle.markDead(tdb.db, m.id, late!.claimId, 'late')).toBe(false);
    expect(await settle.scheduleRetry(tdb.db, m.id, late!.claimId, 100, 'late')).toBe(false);
    expect(await settle.releaseUnknownTopic(tdb.db, m.id, late!.claimId, 100)).toBe(false);
    expect(await handBack(tdb.db, [{ id: m.id, claimId: late!.claimId }])).toBe(0);
    const after = await getMessage(tdb.db, m.id);
    expect({ ...after, due_in: 0 }).toEqual({ ...before, due_in: 0 });

    // The current claim settles normally.
    expect(await settle.recordHandlerDone(tdb.db, m.id, current!.claimId, 'h1')).toBe(true);
    expect(await settle.markDone(tdb.db, m.id, current!.claimId)).toBe(true);
    const done = await getMessage(tdb.db, m.id);
    expect(done).toMatchObject({ status: 'DONE', handlers_done: ['h1'], claim_id: null });
    expect(done.processed_at).not.toBeNull();
    // And once DONE, even the claim that did it cannot change it again.
    expect(await settle.markDead(tdb.db, m.id, current!.claimId, 'x')).toBe(false);
  });

  it('hand-back returns claimed messages as they were: attempt not counted, due now', async () => {
    const rows = await insertMessages(tdb.db, [{ topic: 't' }, { topic: 't' }]);
    const claimed = await claim(10);
    expect(await handBack(tdb.db, claimed)).toBe(2);
    const after = await getMessages(tdb.db, rows.map((r) => r.id));
    for (const r of after) {
      expect(r).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
      expect(r.due_in).toBeLessThanOrEqual(0);
    }
  });
});
