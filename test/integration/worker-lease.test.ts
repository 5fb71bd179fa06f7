import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { ClaimConnection } from '../../src/outbox/claim-connection.ts';
import { markDoneMany } from '../../src/outbox/settle.ts';
import { createWorker } from '../../src/worker/loop.ts';
import { HandlerRegistry } from '../../src/worker/registry.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { captureLogger, getMessages, insertMessages, makeDue, sleep, testHandler, workerConfig } from '../helpers/worker.ts';

/*
 * Issue 10, item 1: a prefetched message must never start with too little of its lease left, and
 * every settle matches on (id, claim id).
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('wlease');
});
afterAll(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.db.execute(sql`truncate outbox`);
});

describe('a prefetched message and its lease', () => {
  it('short lease, one slot, batch 2, slow handler, a second worker claiming: each message runs once, never in parallel', async () => {
    // The reproduction of issue 10: LEASE_SECONDS=6; worker A claims 2 and has 1 slot; its handler
    // takes 4.5 s, so the second message waits 4.5 s of its 6 s lease before a slot frees. Worker B
    // claims (runOnce) at 6.3 s. Before the fix, A started the second message at 4.5 s with 1.5 s
    // of lease left, its first heartbeat came 2 s later, and B ran it too, at the same time.
    const runs: { worker: string; id: string; start: number; end: number }[] = [];
    const slow = (who: string) =>
      testHandler('slow', 'test.slow', async (ctx) => {
        const run = { worker: who, id: ctx.messageId, start: Date.now(), end: Infinity };
        runs.push(run);
        await sleep(4_500);
        run.end = Date.now();
      });
    const env = { LEASE_SECONDS: '6' };
    const make = (who: string) =>
      createWorker({
        db: tdb.db,
        config: workerConfig(tdb, env),
        registry: new HandlerRegistry([slow(who)]),
        logger: captureLogger().logger,
        listen: false,
        purge: false,
        batchSize: 2,
        concurrency: 1,
      });
    const a = make('A');
    const b = make('B');
    const msgs = await insertMessages(tdb.db, [{ topic: 'test.slow' }, { topic: 'test.slow' }]);

    const t0 = Date.now();
    const aDone = a.runUntilEmpty();
    await sleep(6_300 - (Date.now() - t0));
    const bDone = b.runOnce();
    await Promise.all([aDone, bDone]);
    await Promise.all([a.stop(), b.stop()]);

    const byId = new Map<string, typeof runs>();
    for (const r of runs) byId.set(r.id, [...(byId.get(r.id) ?? []), r]);
    const ids = msgs.map((m) => m.public_id);
    for (const id of ids) expect(byId.get(id), `runs of ${id}`).toHaveLength(1);
    const rows = await getMessages(tdb.db, msgs.map((m) => m.id));
    expect(rows.map((r) => r.status)).toEqual(['DONE', 'DONE']);
  }, 30_000);

  it('a message that waited past half its lease is handed back (attempt not counted), not started', async () => {
    const started: string[] = [];
    const w = createWorker({
      db: tdb.db,
      config: workerConfig(tdb, { LEASE_SECONDS: '2' }),
      registry: new HandlerRegistry([
        testHandler('slow', 'test.slow', async (ctx) => {
          started.push(ctx.messageId);
          await sleep(1_200);
        }),
      ]),
      logger: captureLogger().logger,
      listen: false,
      purge: false,
      batchSize: 2,
      concurrency: 1,
    });
    const events: string[] = [];
    w.events.on('outcome', (e) => events.push(`${e.outcome}`));
    const [m1, m2] = await insertMessages(tdb.db, [{ topic: 'test.slow' }, { topic: 'test.slow' }]);
    expect(await w.runOnce()).toBe(2);
    expect(started).toEqual([m1!.public_id]);
    const [r1, r2] = await getMessages(tdb.db, [m1!.id, m2!.id]);
    expect(r1).toMatchObject({ status: 'DONE', attempts: 1 });
    expect(r2).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
    expect(r2!.due_in).toBeLessThanOrEqual(0);
    expect(events.sort()).toEqual(['done', 'handed_back']);
    expect(w.summary()).toMatchObject({ claimed: 2, done: 1, handedBack: 1 });
    await w.stop();
  });
});

describe('settles match on (id, claim id)', () => {
  it('the batched DONE reports success per (id, claim): a stale claim of the same message is told it lost', async () => {
    const [m] = await insertMessages(tdb.db, [{ topic: 'test.x' }]);
    const claimer = new ClaimConnection(tdb.db);
    const [stale] = await claimer.claimBatch({ limit: 1, leaseSeconds: 60, claimId: randomUUID() });
    await makeDue(tdb.db); // the stale claim's lease ran out…
    const [current] = await claimer.claimBatch({ limit: 1, leaseSeconds: 60, claimId: randomUUID() }); // …and it was claimed again
    await claimer.close();
    expect(current!.id).toBe(m!.id);
    // Both claims of the one message in the same batched write, the stale one first.
    const held = await markDoneMany(tdb.db, [
      { id: m!.id, claimId: stale!.claimId, lastHandler: 'h' },
      { id: m!.id, claimId: current!.claimId, lastHandler: 'h' },
    ]);
    expect(held).toEqual([false, true]);
  });
});
