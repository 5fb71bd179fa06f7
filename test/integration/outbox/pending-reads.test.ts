import { describe, expect, it } from 'vitest';
import { depthHistory, outboxStats, pendingOfTopics, pendingUpTo } from '../../../src/outbox/index.ts';
import { pendingRows } from '../../../src/outbox/testing.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';

/*
 * The queue's depth and age read without an index of PENDING rows by created_at (ADR 0051): the
 * claim's two partial indexes hold every PENDING row between them, split on turn. A message of each
 * walk must be counted, and the reads must stay on those indexes (the DONE history is never scanned).
 */

const tdb = useTestDatabase('pendingreads', { truncate: 'outbox' });

/** Three PENDING messages, one of them a first delivery with a turn and one written at the day's start; two DONE. */
async function queue(): Promise<{ oldest: Date }> {
  const rows = await insertMessages(tdb.db, [
    { topic: 'a.happened', key: 'k1' },
    { topic: 'a.happened', key: 'k2' },
    { topic: 'b.happened' },
    { topic: 'a.happened' },
    { topic: 'b.happened' },
  ]);
  const [withTurn, oldest, , done1, done2] = rows.map((r) => r.id);
  await tdb.pool.query(`update outbox set turn = 1 where id = $1`, [withTurn]);
  await tdb.pool.query(`update outbox set created_at = date_trunc('day', now() at time zone 'UTC') at time zone 'UTC' where id = $1`, [
    oldest,
  ]);
  await tdb.pool.query(`update outbox set status = 'DONE', processed_at = now() where id = any($1)`, [[done1, done2]]);
  expect((await tdb.pool.query(`select count(*)::int as n from outbox where status = 'PENDING' and turn is not null`)).rows[0].n).toBe(1);
  const { rows: o } = await tdb.pool.query<{ at: Date }>(`select created_at as at from outbox where id = $1`, [oldest]);
  return { oldest: o[0]!.at };
}

describe('the PENDING rows through the claim walks', () => {
  it('are all counted, in both walks, and the oldest one is aged', async () => {
    const { oldest } = await queue();
    const stats = await outboxStats(tdb.db);
    expect(stats.pending).toBe(3);
    expect(stats.byTopic.map((t) => [t.topic, t.pending])).toEqual([
      ['a.happened', 2],
      ['b.happened', 1],
    ]);
    const age = (Date.now() - oldest.getTime()) / 1000;
    expect(Math.abs(stats.oldestPendingAgeSeconds! - age)).toBeLessThanOrEqual(2);

    expect(await pendingUpTo(tdb.db, 100)).toBe(3);
    expect(await pendingUpTo(tdb.db, 2)).toBe(2);
    expect(await pendingOfTopics(tdb.pool, ['a.happened'])).toMatchObject({ pending: 2 });
    const depth = await depthHistory(tdb.db, 1);
    expect(depth.at(-1)).toMatchObject({ pending: 3, dead: 0 });
  });

  it('are read through the two partial indexes, never a scan of the days (which status alone would be)', async () => {
    await queue();
    const client = await tdb.pool.connect();
    try {
      await client.query('begin');
      // Costs say nothing with a few rows: forbid the scan, and a plan that still has one had no index to use.
      await client.query('set local enable_seqscan = off');
      const plan = async (text: string) =>
        (await client.query<{ 'QUERY PLAN': string }>(`explain ${text}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
      const walks = await plan(`select count(*) from ${pendingRows('o.created_at', 'o.topic is not null')} as p`);
      expect(walks).not.toMatch(/Seq Scan/);
      expect(walks).toMatch(/available_at_id_idx/);
      expect(walks).toMatch(/priority_turn_id_idx/);
      expect(await plan(`select count(*) from outbox where status = 'PENDING'`)).toMatch(/Seq Scan/);
    } finally {
      await client.query('rollback');
      client.release();
    }
  });
});
