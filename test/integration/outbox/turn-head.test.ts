import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { pendingTurnIndexReads } from '../../../src/outbox/testing.ts';
import { holdSnapshot } from '../../helpers/held-snapshot.ts';

/*
 * outbox_turn's head probe (src/outbox/migrations/0006_head_from_where_it_was.sql, ADR 0060): each
 * connection starts its walk of the PENDING turns at (turn 0, the head's id it last found), so
 * under a snapshot held open it passes the messages finished since its own last probe, not every
 * one finished under the snapshot; and it gives the head the probe from the start gives.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('turnhead');
});
afterAll(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.pool.query('truncate outbox');
});

const connections: pg.Client[] = [];
afterAll(async () => {
  await Promise.all(connections.map((c) => c.end()));
});
/** A producer's connection: its place is its own. */
async function producer(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: tdb.url });
  await c.connect();
  connections.push(c);
  return c;
}

/** The turn outbox_turn gives a message of no group and no owner: the head of priority 0. */
async function headOn(c: pg.Client): Promise<number> {
  const { rows } = await c.query<{ turn: string }>(`select outbox_turn(null, null, 0) as turn`);
  return Number(rows[0]!.turn);
}

/** Writes PENDING first deliveries of priority 0 with these turns, in this order; returns their ids. */
async function pending(...turns: number[]): Promise<number[]> {
  const { rows } = await tdb.pool.query<{ id: number }>(
    `insert into outbox (topic, payload, turn) select 'test.t', '{}', t from unnest($1::bigint[]) with ordinality u(t, n) order by n returning id::int`,
    [turns],
  );
  return rows.map((r) => r.id);
}

/** Finishes messages, as the worker's DONE does: their entries leave the pending indexes' live set. */
async function finish(ids?: number[]): Promise<void> {
  await tdb.pool.query(
    `update outbox set status = 'DONE', processed_at = now() where status = 'PENDING' and ($1::bigint[] is null or id = any($1))`,
    [ids ?? null],
  );
}

/** The head `c` reads, and how many entries of the PENDING turns' index that read walked. */
async function headAndReads(c: pg.Client): Promise<{ head: number; read: number }> {
  const before = await pendingTurnIndexReads(c);
  const head = await headOn(c);
  return { head, read: (await pendingTurnIndexReads(c)) - before };
}

describe("outbox_turn's head, from where the connection last found it", () => {
  it('walks the messages finished since its last probe under a held snapshot, not all of them', async () => {
    const steady = await producer();
    const held = await holdSnapshot(tdb.url);
    try {
      // 2,000 first deliveries written, waiting while the producer asks for turns, then finished,
      // 500 at a time, under the snapshot: their entries stay in the index.
      for (let round = 0; round < 4; round++) {
        await pending(...Array(500).fill(0));
        expect(await headOn(steady)).toBe(0);
        await finish();
        expect(await headOn(steady)).toBe(0); // the queue is empty: the place moves past every id given
      }
      await pending(2);
      const kept = await headAndReads(steady);
      const cold = await headAndReads(await producer()); // a connection that never probed starts at the start
      expect(kept.head).toBe(2);
      expect(cold.head).toBe(2);
      expect(cold.read).toBeGreaterThanOrEqual(2_000);
      expect(kept.read).toBeLessThan(10);
    } finally {
      await held.release();
    }
  });

  it('gives the head the probe from the start gives, as the head moves on and the queue empties and fills again', async () => {
    const kept = await producer();
    const agree = async (expected: number) => {
      expect(await headOn(kept)).toBe(expected);
      expect(await headOn(await producer())).toBe(expected);
    };
    const [t3, t4] = await pending(3, 4, 5);
    await agree(3);
    await finish([t3!]);
    await agree(4);
    await finish([t4!]);
    await agree(5);
    await finish();
    await agree(0);
    // Another writer starts the turns over (a group's flood from an empty queue): the kept place
    // was past none of them.
    const [f0, f1] = await pending(0, 1, 2, 3);
    await agree(0);
    await finish([f0!]);
    await agree(1);
    await finish([f1!]);
    await agree(2);
    // A turn above 0 written behind a head of turn 0 the connection had found: still seen.
    await finish();
    const [z] = await pending(0);
    await agree(0);
    await pending(1);
    await finish([z!]);
    await agree(1);
  });

  it('starts from the start when its place is missing or does not parse, and keeps a place per priority', async () => {
    const c = await producer();
    const [a] = await pending(7);
    await c.query(`insert into outbox (topic, payload, turn, priority) values ('test.t', '{}', 4, -2)`);
    for (const place of ['', 'not a number', '-5', '99999999999999999999']) {
      await c.query(`select set_config('stayhub.outbox_head_0', $1, false)`, [place]);
      expect(await headOn(c)).toBe(7);
    }
    const { rows } = await c.query<{ turn: string }>(`select outbox_turn(null, null, -2) as turn`);
    expect(Number(rows[0]!.turn)).toBe(4);
    const { rows: places } = await c.query<{ p0: string; m2: string }>(
      `select current_setting('stayhub.outbox_head_0') as p0, current_setting('stayhub.outbox_head_m2') as m2`,
    );
    expect(Number(places[0]!.p0)).toBe(a);
    expect(Number(places[0]!.m2)).toBe(a! + 1);
  });
});
