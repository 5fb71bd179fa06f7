import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimOn, connectClaimClient } from '../../../src/outbox/testing.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * Claims racing for the same rows, on real PostgreSQL. When a claim's FOR UPDATE reaches a row
 * that another claim changed and committed after this one's snapshot, PostgreSQL re-checks the
 * row against the statement (EvalPlanQual), building the statement's plan again for it. On
 * PostgreSQL 18 that re-check crashed the server (signal 11, or "pfree called with invalid
 * pointer") while the claim pruned partitions by a value it computed itself: within seconds of
 * four claimers racing, every connection of the server was reset (src/outbox/claim.ts, "The
 * days"). Here: four claim connections, short leases so claimed rows come due again, new keyed
 * messages of both walks (with and without a turn) written all along, half of each batch settled.
 */

const RACE_MS = 6_000;
const CLAIMERS = 4;

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('recheck');
});
afterAll(async () => {
  await tdb?.drop();
});

async function produce(c: pg.Client, until: number): Promise<void> {
  for (let i = 0; Date.now() < until; i += 20) {
    // A fifth of them without a turn (the walk of retried and lane work), the rest with one, in
    // two priorities; 300 keys, so the per-key check has older messages to find.
    await c.query(
      `insert into outbox (topic, payload, key, priority, group_id, turn)
       select 'test.race', '{}'::jsonb, 'k' || (($1::int + s) % 300), p, 'g' || ($1::int % 7),
              case when s % 5 = 0 then null else outbox_turn('g' || ($1::int % 7), p) end
         from generate_series(1, 20) s, lateral (select case when s % 3 = 0 then 10 else 0 end as p) pr`,
      [i],
    );
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function race(url: string, settler: pg.Client, until: number, n: number): Promise<{ claimed: number; errors: string[] }> {
  const c = await connectClaimClient({ connectionString: url, application_name: `recheck-${n}` });
  const errors: string[] = [];
  let claimed = 0;
  c.on('error', (err) => errors.push(err.message));
  try {
    while (Date.now() < until && errors.length === 0) {
      const lanes = n % 2 === 0 ? [] : ['events.relay'];
      const batch = await claimOn(c, { limit: 50, leaseSeconds: 0.2, claimId: randomUUID(), lanes });
      claimed += batch.length;
      const done = batch.filter((_, i) => i % 2 === 0).map((m) => m.id);
      if (done.length > 0) {
        await settler.query(`update outbox set status = 'DONE', processed_at = now() where id = any($1::bigint[])`, [done]);
      }
    }
  } catch (err) {
    errors.push((err as Error).message);
  } finally {
    await c.end().catch(() => {});
  }
  return { claimed, errors };
}

describe('claims racing for the same rows', () => {
  it('never take the server down: the re-check of a row another claim changed', async () => {
    const admin = new pg.Client({ connectionString: tdb.url });
    await admin.connect();
    const settlers = await Promise.all(
      Array.from({ length: CLAIMERS }, async () => {
        const s = new pg.Client({ connectionString: tdb.url });
        await s.connect();
        s.on('error', () => {});
        return s;
      }),
    );
    const producer = new pg.Client({ connectionString: tdb.url });
    await producer.connect();
    producer.on('error', () => {});
    try {
      const until = Date.now() + RACE_MS;
      const [, ...results] = await Promise.all([
        produce(producer, until).catch((err: Error) => err.message),
        ...settlers.map((s, n) => race(tdb.url, s, until, n)),
      ]);
      // A crash ends every connection: the claimers' errors say so ("Connection terminated
      // unexpectedly", "server closed the connection"), and so would the admin's query below.
      expect(results.flatMap((r) => r.errors)).toEqual([]);
      // The race really ran: every claimer claimed, and rows came due again after their short lease.
      for (const r of results) expect(r.claimed).toBeGreaterThan(0);
      const { rows } = await admin.query<{ again: number }>(`select count(*)::int as again from outbox where attempts > 1`);
      expect(rows[0]!.again).toBeGreaterThan(0);
    } finally {
      await Promise.all([admin, producer, ...settlers].map((c) => c.end().catch(() => {})));
    }
  }, 60_000);
});
