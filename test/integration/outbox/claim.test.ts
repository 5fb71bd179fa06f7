import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import {
  CLAIM_STATEMENT,
  claimOn,
  PLANNED_SESSION_SETTINGS,
  PLANNED_SET_STATEMENT,
  ClaimConnection,
  SessionSettingsError,
  applyPlannedSettings,
  connectClaimClient,
  explainClaim,
  markDead,
  markDone,
  markDoneMany,
  recordHandlerDone,
  releaseUnknownTopic,
  scheduleRetry,
  extendLeases,
  handBack,
} from '../../../src/outbox/testing.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { claimTestDatabase } from '../../helpers/claim-fixture.ts';
import { getMessage, getMessages, insertMessage, insertMessages, makeDue } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The claim and settle statements on their own, against real Postgres: SKIP LOCKED, no double
 * claims under concurrency, per-key order, and fencing of late settles.
 *
 * The claims here run with a lock_timeout (on the pool, so on every claim connection made from
 * it): a claim that waited for a row lock instead of skipping it fails within LOCK_TIMEOUT_MS with
 * "canceling statement due to lock timeout", where it would otherwise hang until the test's own
 * timeout with its connection stuck. A claim never waits for a lock when it works, so the bound
 * holds on a machine however busy.
 */

const LOCK_TIMEOUT_MS = 5_000;

let tdb: TestDatabase;
let claimer: ClaimConnection;
claimTestDatabase('wclaim', LOCK_TIMEOUT_MS, (f) => ({ tdb, claimer } = f));

const claim = (limit = 10, leaseSeconds = 60) => claimer.claimBatch({ limit, leaseSeconds, claimId: randomUUID() });

describe('claim', () => {
  it('skips rows another transaction holds locked, and does not wait for it (SKIP LOCKED)', async () => {
    const rows = await insertMessages(
      tdb.db,
      Array.from({ length: 10 }, () => ({ topic: 'test.t' })),
    );
    const ids = rows.map((r) => r.id);
    const holder = new pg.Client({ connectionString: tdb.url });
    await holder.connect();
    try {
      await holder.query('begin');
      // Worker A's claim transaction, frozen in the middle: it holds the first five rows.
      await holder.query('select id from outbox where id = any($1) for update', [ids.slice(0, 5)]);

      // Not waiting is what the lock_timeout checks (a claim that waited for A would be cancelled
      // with a lock-timeout error), not a stopwatch, which a busy machine slows as well.
      const b = await claim(10);
      expect(b.map((m) => m.id).sort((x, y) => x - y)).toEqual(ids.slice(5));
      // Everything left is either locked by A or leased by B: nothing.
      expect(await claim(10)).toEqual([]);
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
    // A's rows are claimable once A is gone.
    expect((await claim(10)).map((m) => m.id).sort((x, y) => x - y)).toEqual(ids.slice(0, 5));
  });

  it('N claimers in parallel over 2,000 messages never claim one twice', async () => {
    await insertMessages(
      tdb.db,
      Array.from({ length: 2000 }, (_, i) => ({ topic: 'test.t', payload: { i } })),
    );
    // Eight workers: each claims on a connection of its own, as a worker does.
    const claimers = Array.from({ length: 8 }, () => new ClaimConnection(tdb.db));
    const seen: number[][] = await Promise.all(
      claimers.map(async (c) => {
        const mine: number[] = [];
        for (;;) {
          const batch = await c.claimBatch({ limit: 25 + Math.floor(Math.random() * 50), leaseSeconds: 60, claimId: randomUUID() });
          if (batch.length === 0) return mine;
          mine.push(...batch.map((m) => m.id));
        }
      }),
    ).finally(() => Promise.all(claimers.map((c) => c.close())));
    const all = seen.flat();
    expect(new Set(all).size).toBe(all.length);
    expect(all.length).toBe(2000);
    // More than one claimer did real work (otherwise this proved nothing about concurrency).
    expect(seen.filter((s) => s.length > 0).length).toBeGreaterThan(1);
    const { rows } = await tdb.db.execute<{ n: number }>(
      sql`select count(*)::int as n from outbox where attempts <> 1 or claim_id is null`,
    );
    expect(rows[0]!.n).toBe(0);
  });

  it('takes the lease: attempts counted, claim token set, hidden until the lease ends', async () => {
    const m = await insertMessage(tdb.db, 'test.t');
    const [c] = await claim(10, 30);
    expect(c).toMatchObject({ id: m.id, attempts: 1, handlersDone: [] });
    const row = await getMessage(tdb.db, m.id);
    expect(row.claim_id).toBe(c!.claimId);
    expect(row.due_in).toBeLessThanOrEqual(30);
    // The lease: 30 s from the claim's own now(), in leased_until; available_at is left as it was.
    const { rows: lease } = await tdb.db.execute<{ lease: number; available_unchanged: boolean }>(
      sql`select extract(epoch from leased_until - claimed_at)::float8 as lease, available_at <= claimed_at as available_unchanged
            from outbox where id = ${m.id}`,
    );
    expect(lease[0]).toEqual({ lease: 30, available_unchanged: true });
    expect(await claim()).toEqual([]);
    await makeDue(tdb.db); // the lease runs out (the worker died)
    const [again] = await claim();
    expect(again).toMatchObject({ id: m.id, attempts: 2 });
    expect(again!.claimId).not.toBe(c!.claimId);
  });

  it('writes no index entry: every claim is a HOT update, on partitions that keep room for it', async () => {
    // Every partition, today's and the days made ahead, leaves 60 % of each page free (migrations/0009).
    const { rows: parts } = await tdb.db.execute<{ name: string; options: string[] | null }>(
      sql`select c.relname as name, c.reloptions as options
            from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'outbox'::regclass`,
    );
    expect(parts.length).toBeGreaterThan(1);
    for (const p of parts) expect(p, p.name).toMatchObject({ options: ['fillfactor=40'] });

    const rows = await insertMessages(
      tdb.db,
      Array.from({ length: 200 }, (_, i) => ({ topic: 'test.t', key: i % 2 ? `k${i}` : null })),
    );
    const { rows: where } = await tdb.db.execute<{ part: string }>(
      sql`select tableoid::regclass::text as part from outbox where id = ${rows[0]!.id}`,
    );
    const part = where[0]!.part;
    const updates = async () => {
      const { rows: st } = await tdb.pool.query<{ upd: number; hot: number }>(
        'select n_tup_upd::int as upd, n_tup_hot_upd::int as hot from pg_stat_user_tables where relname = $1',
        [part],
      );
      return st[0]!;
    };
    const before = await updates();
    const client = await connectClaimClient({ connectionString: tdb.url });
    try {
      // This backend's table statistics are sent at the end of its next transaction, the claim's.
      await client.query('select pg_stat_force_next_flush()');
      const claimed = await claimOn(client, { limit: 500, leaseSeconds: 60, claimId: randomUUID() });
      expect(claimed).toHaveLength(200);
    } finally {
      await client.end();
    }
    const after = await waitFor(async () => {
      const u = await updates();
      return u.upd - before.upd >= 200 && u;
    });
    expect({ updated: after.upd - before.upd, hot: after.hot - before.hot }).toEqual({ updated: 200, hot: 200 });
  });

  it('keeps only live messages in the key index: a message DONE or DEAD leaves no entry there', async () => {
    // The index is partial on the per-key check's own words (migrations/0010).
    const { rows: def } = await tdb.db.execute<{ def: string }>(sql`select pg_get_indexdef('outbox_key_idx'::regclass) as def`);
    expect(def[0]!.def).toMatch(/\(key, id\) WHERE \(\(key IS NOT NULL\) AND \(status <> ALL \(ARRAY\['DONE'::text, 'DEAD'::text\]\)\)\)/);

    await insertMessages(
      tdb.db,
      Array.from({ length: 150 }, (_, i) => ({ topic: 'test.t', key: `k${i}` })),
    );
    const claimed = await claim(100);
    expect(claimed).toHaveLength(100);
    const done = claimed.slice(0, 90);
    expect(
      await markDoneMany(
        tdb.db,
        done.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: null })),
      ),
    ).toEqual(done.map(() => true));
    await tdb.pool.query(`update outbox set status = 'DEAD', claim_id = null, leased_until = null where id = any($1::bigint[])`, [
      claimed.slice(90).map((m) => m.id),
    ]);
    // Left: the 50 never claimed. A VACUUM that cleans the indexes counts what each one holds.
    await tdb.db.execute(sql`vacuum (index_cleanup on) outbox`);
    const { rows: held } = await tdb.db.execute<{ entries: number }>(
      sql`select sum(greatest(c.reltuples, 0))::int as entries
            from pg_partition_tree('outbox_key_idx') t join pg_class c on c.oid = t.relid where t.isleaf`,
    );
    expect(held[0]!.entries).toBe(50);
  });

  /*
   * The claim's cached plan (src/outbox/claim-connection.ts): made once per connection, from the
   * statistics and size of that moment, and kept. These tests make it on a quiet, a tiny and a
   * never-analyzed outbox, then send a burst, and look at the plan the burst is claimed with.
   */
  const picking = (plan: string) => plan.slice(plan.indexOf('CTE aged'), plan.indexOf('CTE claimed')); // the part that picks the rows
  const updating = (plan: string) => plan.slice(plan.indexOf('CTE claimed'), plan.indexOf('CTE Scan on claimed')); // the part that updates them
  // The outbox is partitioned by day (src/outbox/partitions.ts): each node names a partition (o_1 …).
  const WALK =
    /Index Scan using outbox_\w+ on (outbox_\w+) o_\d+ \(actual [^)]*rows=(\d+)[^\n]*\n\s+Index Cond: \(available_at <= now\(\)\)/;
  const KEY_PROBE = /Index Scan using outbox_\w*key\w*_idx on outbox_\w+ e_\d+[^\n]*\n\s+Index Cond: [^\n]*\(key = o_\d+\.key\)/;

  /** A connection as the worker's claim connection is (its session settings), or a plain one. */
  async function connect(url: string, settings = true): Promise<pg.Client> {
    if (settings) return connectClaimClient({ connectionString: url });
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    return c;
  }

  /** The plan must be the one shape: the ordered walk, a probe by key, index lookups for the update. */
  function expectTheOneShape(plan: string) {
    expect(picking(plan)).toMatch(WALK);
    expect(picking(plan)).toMatch(KEY_PROBE);
    // A Merge Append of the partitions' walks keeps their order (its "Sort Key:"); a Sort node would not.
    expect(picking(plan)).not.toMatch(/Bitmap|Sort(?! Key)|Hash|Seq Scan|Join Filter|Materialize|Memoize/);
    expect(updating(plan)).toMatch(/Index Scan using outbox_\w+_pkey on outbox_\w+/);
    expect(updating(plan)).not.toMatch(/Seq Scan|Bitmap|Index Scan using outbox_\w*key_/);
  }

  it('runs from one cached plan, made on an idle outbox and kept for a burst after ANALYZE saw only DONE rows', async () => {
    // Statistics from a quiet outbox (everything DONE), then a burst the planner does not know of;
    // every tenth message shares a key with others, so the per-key check has work to do.
    await tdb.db.execute(
      sql`insert into outbox (topic, key, payload, status) select 'test.t', gen_random_uuid()::text, '{}', 'DONE' from generate_series(1, 3000)`,
    );
    await tdb.db.execute(sql`vacuum analyze outbox`);
    const c = await connect(tdb.url);
    try {
      // An idle worker's empty polls: the plan is made now, for an outbox with nothing PENDING.
      for (let i = 0; i < 12; i++) expect(await claimOn(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() })).toEqual([]);
      const { rows: stmt } = await c.query(`select generic_plans::int, custom_plans::int from pg_prepared_statements where name = $1`, [
        CLAIM_STATEMENT,
      ]);
      expect(stmt).toEqual([{ generic_plans: 12, custom_plans: 0 }]);

      await tdb.db.execute(
        sql`insert into outbox (topic, key, payload) select 'test.t', case when i % 10 = 0 then 'k' || (i % 7) else gen_random_uuid()::text end, '{}' from generate_series(1, 5000) i`,
      );
      // The case this is about: the planner believes a handful of rows are PENDING; 5,000 are.
      const { rows: est } = await c.query(`explain (format json) select id from outbox where status = 'PENDING'`);
      expect(est[0]['QUERY PLAN'][0].Plan['Plan Rows']).toBeLessThan(50);

      // The cached plan, run on the burst: the walk stops at the limit.
      const plan = await explainClaim(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() }, { analyze: true });
      expectTheOneShape(plan);
      // Summed over the days' walks: the quiet rows and the burst sit in two days' partitions when
      // the test runs across midnight.
      const walked = [...picking(plan).matchAll(new RegExp(WALK, 'g'))].reduce((sum, m) => sum + Number(m[2]), 0);
      expect(walked).toBeGreaterThanOrEqual(500);
      expect(walked).toBeLessThan(1000); // of 5,000 pending

      // And it claims the right ones: the oldest 500 that no older PENDING message of their key holds back.
      const { rows: expected } = await c.query(
        `select id::float8 from (select id, available_at, key, row_number() over (partition by key order by id) as nth from outbox where status = 'PENDING') p
          where key is null or nth = 1 order by available_at, id limit 500`,
      );
      const claimed = await claimOn(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() });
      expect(claimed.map((m) => m.id)).toEqual(expected.map((r) => r.id));
      expect(claimed.filter((m) => m.key?.startsWith('k'))).toHaveLength(7);
      // 12 polls, the EXPLAIN and this claim: all from the cached plan.
      const { rows: after } = await c.query(`select generic_plans::int, custom_plans::int from pg_prepared_statements where name = $1`, [
        CLAIM_STATEMENT,
      ]);
      expect(after).toEqual([{ generic_plans: 14, custom_plans: 0 }]);
    } finally {
      await c.end();
    }
  });

  it('keeps its plan when it was made on a tiny outbox: a probe by key, not the whole table per candidate', async () => {
    // ANALYZE of a three-row outbox; the plan made now is kept for whatever comes next.
    await tdb.db.execute(
      sql`insert into outbox (topic, key, payload, status) select 'test.t', gen_random_uuid()::text, '{}', 'DONE' from generate_series(1, 3)`,
    );
    await tdb.db.execute(sql`vacuum analyze outbox`);
    const c = await connect(tdb.url);
    const plain = await connect(tdb.url, false);
    try {
      await plain.query('set plan_cache_mode = force_generic_plan');
      const opts = { limit: 500, leaseSeconds: 60, claimId: randomUUID() };
      await claimOn(c, opts); // the plan is made here
      await explainClaim(plain, opts);
      await tdb.db.execute(
        sql`insert into outbox (topic, key, payload) select 'test.t', gen_random_uuid()::text, '{}' from generate_series(1, 20000)`,
      );
      expectTheOneShape(await explainClaim(c, { ...opts, claimId: randomUUID() }, { analyze: true }));
      // The case: a plan cached on the tiny outbox without the settings reads the table whole.
      expect(await explainClaim(plain, opts)).toMatch(/Seq Scan on outbox_/);
    } finally {
      await c.end();
      await plain.end();
    }
  });

  it('keeps its plan when it was made on a table never analyzed: the ordered walk, not a sort of the whole burst', async () => {
    const fresh = await createTestDatabase('wclaimfresh');
    const c = await connect(fresh.url);
    try {
      await claimOn(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() }); // the plan is made here, on an empty table
      await c.query(
        `insert into outbox (topic, key, payload) select 'test.t', gen_random_uuid()::text, '{}' from generate_series(1, 20000)`,
      );
      expectTheOneShape(await explainClaim(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() }, { analyze: true }));
      // Without the settings, the planner (guessing a few rows) once sorted the whole burst here,
      // then probed each candidate's key with a bitmap scan; since the claim no longer reads the
      // span of PENDING days first (ADR 0019), it happens to choose this shape on its own. The
      // settings are what make it the only one: the tiny-outbox test above shows the other case.
    } finally {
      await c.end();
      await fresh.drop();
    }
  });

  it("keeps its session settings to itself: the claim connection has them, the shared pool the server's", async () => {
    const opened: pg.Pool[] = [];
    const own = new ClaimConnection(tdb.db, { onOpen: (pool) => opened.push(pool) });
    try {
      await own.claimBatch({ limit: 10, leaseSeconds: 60, claimId: randomUUID() });
      expect(opened).toHaveLength(1);
      const settings = (q: { query(text: string, values: unknown[]): Promise<{ rows: { name: string; setting: string }[] }> }) =>
        q
          .query('select name, setting from pg_settings where name = any($1) order by name', [Object.keys(PLANNED_SESSION_SETTINGS)])
          .then((r) => Object.fromEntries(r.rows.map((x) => [x.name, x.setting])));
      expect(await settings(opened[0]!)).toEqual({ ...PLANNED_SESSION_SETTINGS });
      // The pool's own options reach it too: this file's lock_timeout, which the SKIP LOCKED test
      // relies on.
      const { rows: lockTimeout } = await opened[0]!.query(`select current_setting('lock_timeout') as t`);
      expect(lockTimeout[0].t).toBe(`${LOCK_TIMEOUT_MS / 1000}s`);
      const { rows } = await opened[0]!.query("select current_setting('application_name') as name");
      expect(rows[0].name).toBe('stayhub-test-claim');
      // The handlers' pool: the planner as the server has it.
      const shared = await settings(tdb.pool);
      for (const name of ['enable_seqscan', 'enable_bitmapscan', 'enable_sort', 'enable_hashjoin', 'enable_mergejoin'])
        expect(shared[name]).toBe('on');
      expect(shared.plan_cache_mode).toBe('auto');
    } finally {
      await own.close();
    }
  });

  it('sends its settings with SET after connecting, not as a startup parameter a pooler would refuse', async () => {
    expect(PLANNED_SET_STATEMENT).toBe(
      Object.entries(PLANNED_SESSION_SETTINGS)
        .map(([k, v]) => `set ${k} = ${v}`)
        .join('; '),
    );
    const opened: pg.Pool[] = [];
    const own = new ClaimConnection(tdb.db, { onOpen: (pool) => opened.push(pool) });
    try {
      await own.claimBatch({ limit: 1, leaseSeconds: 60, claimId: randomUUID() });
      // No `options` of ours among the connection parameters: the pool's own only (this file's
      // lock_timeout), which the settings test above finds on the connection.
      const config = (opened[0] as unknown as { options: pg.PoolConfig }).options;
      expect(new URL(config.connectionString!).searchParams.get('options')).toBe(`-c lock_timeout=${LOCK_TIMEOUT_MS}`);
      expect(config.options).toBeUndefined();
    } finally {
      await own.close();
    }
  });

  it('refuses a connection where the settings did not hold, and claims nothing on it', async () => {
    // A session that lies about its settings: what a transaction-mode pooler does when the read-back
    // lands on another server connection than the SET.
    const c = new pg.Client({ connectionString: tdb.url });
    await c.connect();
    try {
      const query = c.query.bind(c) as (...args: unknown[]) => Promise<unknown>;
      (c as unknown as { query: typeof query }).query = (text: unknown, ...rest: unknown[]) =>
        typeof text === 'string' && text.startsWith('set ')
          ? // The SETs land nowhere; the backend read in the same round trip is this one's.
            (query('select pg_backend_pid() as pid') as Promise<unknown>).then((r) => [{ rows: [] }, r])
          : query(text, ...rest);
      const failure = await applyPlannedSettings(c).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(SessionSettingsError);
      expect((failure as Error).message).toMatch(/enable_seqscan is on, want off;.*session connection/);
    } finally {
      await c.end();
    }
  });

  it('refuses a limit that is not a positive integer and a lease that is not a positive number', async () => {
    await expect(claim(0)).rejects.toThrow(/limit/);
    await expect(claim(1.5)).rejects.toThrow(/limit/);
    await expect(claim(10, Number.NaN)).rejects.toThrow(/lease/);
    await expect(claim(10, 0)).rejects.toThrow(/lease/);
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
    await scheduleRetry(tdb.db, a1!.id, c1.claimId, 60, 'x');
    expect(await claim(10)).toEqual([]);
    // Its backoff over (time travel, not a sleep): a1 comes back, a2 still behind it.
    await makeDue(tdb.db, [a1!.id]);
    const second = await claim(10);
    expect(second.map((m) => m.id)).toEqual([a1!.id]);
    // a1 done: now a2.
    await markDone(tdb.db, a1!.id, second[0]!.claimId);
    expect((await claim(10)).map((m) => m.id)).toEqual([a2!.id]);
  });

  it('a DEAD message does not block its key', async () => {
    const [a1, a2] = await insertMessages(tdb.db, [
      { topic: 't', key: 'A' },
      { topic: 't', key: 'A' },
    ]);
    const [c] = await claim(10);
    expect(c!.id).toBe(a1!.id);
    await markDead(tdb.db, a1!.id, c!.claimId, 'h: PermanentError: no');
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

    expect(await recordHandlerDone(tdb.db, m.id, late!.claimId, 'h1')).toBe(false);
    expect(await markDone(tdb.db, m.id, late!.claimId)).toBe(false);
    expect(await markDead(tdb.db, m.id, late!.claimId, 'late')).toBe(false);
    expect(await scheduleRetry(tdb.db, m.id, late!.claimId, 100, 'late')).toBe(false);
    expect(await releaseUnknownTopic(tdb.db, m.id, late!.claimId, 100)).toBe(false);
    expect(await handBack(tdb.db, [{ id: m.id, claimId: late!.claimId }])).toBe(0);
    const after = await getMessage(tdb.db, m.id);
    expect({ ...after, due_in: 0 }).toEqual({ ...before, due_in: 0 });

    // The current claim settles normally.
    expect(await recordHandlerDone(tdb.db, m.id, current!.claimId, 'h1')).toBe(true);
    expect(await markDone(tdb.db, m.id, current!.claimId)).toBe(true);
    const done = await getMessage(tdb.db, m.id);
    expect(done).toMatchObject({ status: 'DONE', handlers_done: ['h1'], claim_id: null });
    expect(done.processed_at).not.toBeNull();
    // And once DONE, even the claim that did it cannot change it again.
    expect(await markDead(tdb.db, m.id, current!.claimId, 'x')).toBe(false);
  });

  it('marks DONE in one batch messages created minutes apart: the batch is bounded by its oldest message', async () => {
    // markDoneMany bounds its UPDATE by created_at so older days' partitions are skipped; the bound
    // must come from the oldest message of the batch, or the older ones are silently not written.
    const [older, newer] = await insertMessages(tdb.db, [{ topic: 'test.t' }, { topic: 'test.t' }]);
    // A fresh database's first partition holds everything before tomorrow: the row stays in it.
    await tdb.pool.query(`update outbox set created_at = created_at - interval '10 minutes' where id = $1`, [older!.id]);
    const claimed = await claim(10);
    expect(claimed.map((m) => m.id)).toEqual([older!.id, newer!.id]);
    expect(claimed[1]!.createdAtMs - claimed[0]!.createdAtMs).toBeGreaterThan(1000);

    const items = claimed.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: null, createdAtMs: m.createdAtMs }));
    expect(await markDoneMany(tdb.db, items)).toEqual([true, true]);
    expect(await markDoneMany(tdb.db, [...items].reverse())).toEqual([false, false]); // DONE already: fenced
    expect((await getMessages(tdb.db, [older!.id, newer!.id])).map((m) => m.status)).toEqual(['DONE', 'DONE']);
  });

  it("a late worker's heartbeat extends only its own claims, never the lease of a claim that superseded it", async () => {
    const [m, other] = await insertMessages(tdb.db, [{ topic: 'test.t' }, { topic: 'test.t' }]);
    const [late] = await claim(1, 1);
    await makeDue(tdb.db, [m!.id]); // late's lease has run out…
    const claimed = await claim(10); // …and another worker claimed the message (and the other one)
    const current = claimed.find((c) => c.id === m!.id)!;
    const mine = claimed.find((c) => c.id === other!.id)!;
    expect(current.claimId).not.toBe(late!.claimId);
    const leaseEnd = async () => {
      const { rows } = await tdb.pool.query<{ s: number }>(
        'select extract(epoch from leased_until)::float8 as s from outbox where id = $1',
        [m!.id],
      );
      return rows[0]!.s;
    };
    const before = await leaseEnd();

    // The late worker's heartbeat, alone and in a batch with a claim it does hold: it is told it
    // lost the message, and the current claim's lease (60 s) is not moved to its hour.
    expect(await extendLeases(tdb.db, [{ id: m!.id, claimId: late!.claimId }], 3600)).toEqual([false]);
    expect(await extendLeases(tdb.db, [{ id: m!.id, claimId: late!.claimId }, mine], 3600)).toEqual([false, true]);
    expect(await leaseEnd()).toBe(before);
    expect((await getMessage(tdb.db, m!.id)).claim_id).toBe(current.claimId);
    expect((await getMessage(tdb.db, other!.id)).due_in).toBeGreaterThan(3000);
    // The current claim extends its own lease.
    expect(await extendLeases(tdb.db, [current], 3600)).toEqual([true]);
    expect(await leaseEnd()).toBeGreaterThan(before + 3000);
  });

  it('hand-back returns claimed messages as they were: attempt not counted, due now', async () => {
    const rows = await insertMessages(tdb.db, [{ topic: 't' }, { topic: 't' }]);
    const claimed = await claim(10);
    expect(await handBack(tdb.db, claimed)).toBe(2);
    const after = await getMessages(
      tdb.db,
      rows.map((r) => r.id),
    );
    for (const r of after) {
      expect(r).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
      expect(r.due_in).toBeLessThanOrEqual(0);
    }
  });
});
