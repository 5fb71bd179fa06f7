import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { pendingTurnIndexReads } from '../../../src/outbox/testing.ts';

/*
 * outbox_turn (src/outbox/migrations/0004_turns_from_cached_plans.sql) runs its three probes from
 * plans made once per connection. Such a plan does not know the group or the owner it probes for,
 * so each probe is written so that only its own index can answer it. The case that broke the plain
 * `group_id = grp`: the statistics of a quiet day with two groups, then a turn asked for a group
 * with nothing PENDING, which walked every PENDING turn of the priority.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('turnplan');
  // 20,000 PENDING first deliveries of two groups and one owner, and statistics that saw only them.
  await tdb.pool.query(
    `insert into outbox (topic, payload, group_id, owner_id, turn)
     select 'test.t', '{}', case when i % 2 = 0 then 'a' else 'b' end, 'o', i from generate_series(1, 20000) i`,
  );
  await tdb.pool.query('analyze outbox');
});
afterAll(async () => {
  await tdb?.drop();
});

describe('outbox_turn from cached plans', () => {
  it('probes a group and an owner it has never seen by their own indexes, not the priority’s whole queue', async () => {
    // A new connection: its plans are made now, from the statistics above.
    const c = new pg.Client({ connectionString: tdb.url });
    await c.connect();
    try {
      const before = await pendingTurnIndexReads(c);
      const { rows } = await c.query<{ turn: string }>(
        `select outbox_turn('new-' || i, 'owner-' || i, 0) as turn from generate_series(1, 10) i`,
      );
      // Nothing of theirs is PENDING: each gets the head of the queue.
      expect(rows.map((r) => Number(r.turn))).toEqual(Array(10).fill(1));
      const read = (await pendingTurnIndexReads(c)) - before;
      // The head's probe reads the first entry of each day; the misplanned group probe read all
      // 20,000 PENDING turns for each call.
      expect(read).toBeGreaterThan(0);
      expect(read).toBeLessThan(100);
    } finally {
      await c.end();
    }
  });

  it('gives the turns it gave: one past the group’s latest and the owner’s latest', async () => {
    const { rows } = await tdb.pool.query<{ a: string; b: string; owner: string }>(
      `select outbox_turn('a', null, 0) as a, outbox_turn('b', 'someone', 0) as b, outbox_turn(null, 'o', 0) as owner`,
    );
    expect(rows[0]).toEqual({ a: '20001', b: '20000', owner: '20001' });
  });
});
