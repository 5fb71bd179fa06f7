import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { CLAIM, CLAIM_AGED, ClaimConnection, connectClaimClient, explainStatement, markDoneMany } from '../../../src/outbox/testing.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { claimTestDatabase } from '../../helpers/claim-fixture.ts';
import { holdSnapshot } from '../../helpers/held-snapshot.ts';
import { pagesReadForOne } from '../../helpers/statement-plans.ts';
import { getMessages, insertMessages } from '../../helpers/outbox-rows.ts';

/*
 * The poll's walk between its full walks (src/outbox/claim.ts CLAIM_AGED, ADR 0059): the due
 * messages without a turn (retries, postponed messages, lane work), as the full walk takes them,
 * and no first delivery; its cost does not grow with the first deliveries finished under a
 * snapshot held open, which every full walk passes.
 */

let tdb: TestDatabase;
let claimer: ClaimConnection;
claimTestDatabase('wclaimaged', 5_000, (f) => ({ tdb, claimer } = f));

const claimAged = (limit = 10) => claimer.claimAged({ limit, leaseSeconds: 60, claimId: randomUUID() });

/** The rows as a first delivery is written: with a turn (enqueue gives one; insertMessages does not). */
const giveTurns = (ids: number[]) => tdb.db.execute(sql`update outbox set turn = 0 where id = any(${`{${ids.join(',')}}`}::bigint[])`);

describe("the poll's walk of the messages without a turn", () => {
  it('takes the due messages without a turn, as the full walk would, and no first delivery', async () => {
    const [first, retry, later, olderOfKey, blocked] = await insertMessages(tdb.db, [
      { topic: 't.first' },
      { topic: 't.retry' },
      { topic: 't.later' },
      { topic: 't.keyed', key: 'k1' },
      { topic: 't.keyed', key: 'k1' }, // an older message of its key is live
    ]);
    await giveTurns([first!.id, olderOfKey!.id]);
    await tdb.db.execute(sql`update outbox set available_at = now() + interval '1 hour' where id = ${later!.id}`);

    const claimed = await claimAged();
    expect(claimed.map((m) => m.id)).toEqual([retry!.id]);
    expect(claimed[0]!.attempts).toBe(1);
    const untouched = await getMessages(tdb.db, [first!.id, later!.id, olderOfKey!.id, blocked!.id]);
    for (const row of untouched) expect(row).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });

    // The full walk takes the first deliveries it left.
    const walked = await claimer.claimBatch({ limit: 10, leaseSeconds: 60, claimId: randomUUID() });
    expect(walked.map((m) => m.id).sort((a, b) => a - b)).toEqual([first!.id, olderOfKey!.id]);
  });

  it('costs the same under a snapshot held open, where the full walk passes every first delivery finished since it began', async () => {
    const finished = 2_000;
    const client = await connectClaimClient({ connectionString: tdb.url });
    /** Pages read by each walk, explained and rolled back (explainStatement), each finding one retry. */
    const pagesToClaimOne = async () => {
      await insertMessages(tdb.db, [{ topic: 't.retry', key: randomUUID() }]);
      const how = { analyze: true, buffers: true };
      // Each may take two: the retry, then nothing, so each reads its indexes to their end.
      const aged = await pagesReadForOne(explainStatement(client, CLAIM_AGED, [2, randomUUID(), 60, '{}'], how));
      const walk = await pagesReadForOne(explainStatement(client, CLAIM, [2, randomUUID(), 60, '{}'], how));
      const [taken] = await claimAged(1);
      await markDoneMany(tdb.db, [{ id: taken!.id, claimId: taken!.claimId, lastHandler: null, createdAtMs: taken!.createdAtMs }]);
      return { aged, walk };
    };
    const held = await holdSnapshot(tdb.url);
    try {
      const before = await pagesToClaimOne();
      // First deliveries written (with their turn, as enqueue writes them), claimed and finished
      // while the snapshot is held: their entries in the second walk's index stay, and so do their
      // rows' old versions.
      await tdb.db.execute(
        sql`insert into outbox (topic, key, payload, turn) select 't.gone', 'gone-' || g, '{}'::jsonb, 0 from generate_series(1, ${finished}) g`,
      );
      for (let i = 0; i < finished; i += 500) {
        const batch = await claimer.claimBatch({ limit: 500, leaseSeconds: 60, claimId: randomUUID() });
        expect(batch.map((m) => m.topic)).toEqual(Array(500).fill('t.gone'));
        await markDoneMany(
          tdb.db,
          batch.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: null, createdAtMs: m.createdAtMs })),
        );
      }
      const after = await pagesToClaimOne();
      expect(after.walk.pages - before.walk.pages).toBeGreaterThan(finished / 40);
      expect(after.aged.pages - before.aged.pages).toBeLessThanOrEqual(4);
      expect(after.aged.text).toMatch(/available_at_id_idx/);
      expect(after.aged.text).not.toMatch(/priority_turn_id_idx/);
      expect(after.walk.text).toMatch(/priority_turn_id_idx/);
    } finally {
      await held.release();
      await client.end();
    }
  });
});
