import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import {
  CLAIM,
  CLAIM_IDS,
  ClaimConnection,
  connectClaimClient,
  explainStatement,
  intArray,
  markDoneMany,
  notifiedBy,
  type MessageRow,
  type NotifiedMessage,
} from '../../../src/outbox/testing.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { claimTestDatabase } from '../../helpers/claim-fixture.ts';
import { holdSnapshot } from '../../helpers/held-snapshot.ts';
import { pagesReadForOne } from '../../helpers/statement-plans.ts';
import { getMessages, insertMessages } from '../../helpers/outbox-rows.ts';

/*
 * The claim of the messages the worker's wake-ups named (src/outbox/claim.ts claimIdsOn): it takes
 * those of them a walk would take, no other, and its cost does not grow with what a snapshot held
 * open keeps in the claim's indexes (ADR 0058).
 */

let tdb: TestDatabase;
let claimer: ClaimConnection;
claimTestDatabase('wclaimids', 5_000, (f) => ({ tdb, claimer } = f));

/** What a wake-up naming the row says (src/outbox/channel.ts): its id and created_at, from its public id. */
const named = (row: MessageRow): NotifiedMessage => notifiedBy(row.public_id)!;

const claimIds = (rows: MessageRow[]) => claimer.claimIds(rows.map(named), { leaseSeconds: 60, claimId: randomUUID() });

describe('the claim of named messages', () => {
  it('takes the named messages a walk would take, and no other', async () => {
    const [due, older, blocked, later, leased, done, unnamed] = await insertMessages(tdb.db, [
      { topic: 't.due' },
      { topic: 't.keyed', key: 'k1' },
      { topic: 't.keyed', key: 'k1' }, // an older message of its key is live
      { topic: 't.later' },
      { topic: 't.leased' },
      { topic: 't.done' },
      { topic: 't.unnamed' },
    ]);
    await tdb.db.execute(sql`update outbox set available_at = now() + interval '1 hour' where id = ${later!.id}`);
    const [heldClaim] = await claimer.claimBatch({ limit: 1, leaseSeconds: 60, claimId: randomUUID() });
    expect(heldClaim!.id).toBe(due!.id); // the walk took the oldest: name it anyway below
    const [doneClaim] = await claimer.claimIds([named(done!)], { leaseSeconds: 60, claimId: randomUUID() });
    expect(await markDoneMany(tdb.db, [{ id: doneClaim!.id, claimId: doneClaim!.claimId, lastHandler: null }])).toEqual([true]);
    await tdb.db.execute(
      sql`update outbox set leased_until = now() + interval '1 minute', claim_id = gen_random_uuid() where id = ${leased!.id}`,
    );

    const claimed = await claimIds([due!, older!, blocked!, later!, leased!, done!]);
    expect(claimed.map((m) => m.topic)).toEqual(['t.keyed']);
    expect(claimed[0]!.id).toBe(older!.id);
    expect(claimed[0]!.attempts).toBe(1);

    const after = new Map((await getMessages(tdb.db, [unnamed!.id, blocked!.id, later!.id])).map((r) => [r.id, r]));
    for (const id of [unnamed!.id, blocked!.id, later!.id]) {
      expect(after.get(id)).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
    }
  });

  it('finds a named message whatever day holds it, and nothing for a name that is not a row', async () => {
    const [row] = await insertMessages(tdb.db, [{ topic: 't.one' }]);
    const at = named(row!).createdAtMs;
    const claimNamed = (m: NotifiedMessage) => claimer.claimIds([m], { leaseSeconds: 60, claimId: randomUUID() });
    // Its id with another time is not it (the time prunes the days), nor is another id at its time.
    expect(await claimNamed({ id: row!.id, createdAtMs: at - 3 * 86_400_000 })).toEqual([]);
    expect(await claimNamed({ id: row!.id + 1000, createdAtMs: at })).toEqual([]);
    expect((await claimIds([row!])).map((m) => m.id)).toEqual([row!.id]);
  });

  it('costs the same under a snapshot held open, where a walk passes every message finished since it began', async () => {
    const finished = 2_000;
    const client = await connectClaimClient({ connectionString: tdb.url });
    /** Pages read by each claim of one new message, explained and rolled back (explainStatement). */
    const pagesToClaimOne = async () => {
      const [fresh] = await insertMessages(tdb.db, [{ topic: 't.fresh', key: randomUUID() }]);
      const n = named(fresh!);
      const how = { analyze: true, buffers: true };
      const window = [new Date(n.createdAtMs - 1000).toISOString(), new Date(n.createdAtMs + 1000).toISOString()];
      const byId = await pagesReadForOne(explainStatement(client, CLAIM_IDS, [intArray([n.id]), randomUUID(), 60, '{}', ...window], how));
      // The walk takes the oldest due: the message before this one is made DONE first.
      const walk = await pagesReadForOne(explainStatement(client, CLAIM, [1, randomUUID(), 60, '{}'], how));
      const [taken] = await claimer.claimIds([n], { leaseSeconds: 60, claimId: randomUUID() });
      await markDoneMany(tdb.db, [{ id: taken!.id, claimId: taken!.claimId, lastHandler: null, createdAtMs: taken!.createdAtMs }]);
      return { byId, walk };
    };
    const held = await holdSnapshot(tdb.url);
    try {
      const before = await pagesToClaimOne();
      // Messages written, claimed and finished while the snapshot is held: their entries in the
      // claim's index stay, and so do their rows' old versions.
      const gone = await insertMessages(
        tdb.db,
        Array.from({ length: finished }, (_, i) => ({ topic: 't.gone', key: `gone-${i}` })),
      );
      for (let i = 0; i < gone.length; i += 500) {
        const batch = await claimer.claimIds(gone.slice(i, i + 500).map(named), { leaseSeconds: 60, claimId: randomUUID() });
        expect(batch).toHaveLength(Math.min(500, gone.length - i));
        await markDoneMany(
          tdb.db,
          batch.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: null, createdAtMs: m.createdAtMs })),
        );
      }
      const after = await pagesToClaimOne();
      // The walk now reads the index pages and the rows of every finished message (rows on one
      // page count once); the claim by id reads what it read before, give or take a level of
      // the primary key.
      expect(after.walk.pages - before.walk.pages).toBeGreaterThan(finished / 40);
      expect(after.byId.pages - before.byId.pages).toBeLessThanOrEqual(4);
      expect(after.byId.text).toMatch(/_pkey/);
      expect(after.byId.text).not.toMatch(/available_at_id_idx|turn_id_idx|pending/);
    } finally {
      await held.release();
      await client.end();
    }
  });
});
