import { describe, expect, it } from 'vitest';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { sleep } from '../../helpers/wait.ts';

/*
 * The worker's claims grow with a backlog and shrink with it (src/outbox/runner/claim-size.ts):
 * what each claim asked for is read from the 'claimed' events, so the tests say nothing about
 * speed, only about the sizes the worker chose and that every message was handled once.
 */

const tdb = useTestDatabase('wclaimsize', { lockTimeoutMs: 5_000, truncate: 'outbox' });

function makeWorker(
  handle: Parameters<typeof testHandler>[2],
  env: Record<string, string>,
  opts: { batchSize: number; maxBatchSize: number; concurrency: number },
) {
  const { logger } = captureLogger();
  const handled = new Map<number, number>();
  const w = createConfiguredWorker({
    db: tdb.db,
    config: workerConfig(tdb, env),
    registry: new HandlerRegistry([
      testHandler('count', 'test.size', async (ctx) => {
        const i = (ctx.payload as unknown as { i: number }).i;
        handled.set(i, (handled.get(i) ?? 0) + 1);
        await handle?.(ctx);
      }),
    ]),
    logger,
    listen: false,
    housekeeping: false,
    ...opts,
  });
  const claims: number[] = [];
  w.events.on('claimed', (e) => claims.push(e.count));
  return { w, claims, handled };
}

async function notDone(): Promise<number> {
  const { rows } = await tdb.pool.query<{ n: number }>(`select count(*)::int as n from outbox where status <> 'DONE'`);
  return rows[0]!.n;
}

async function fill(n: number) {
  await insertMessages(
    tdb.db,
    Array.from({ length: n }, (_, i) => ({ topic: 'test.size', payload: { i } })),
  );
}

describe('claim size', () => {
  it('a backlog doubles the claims up to the largest, and every message is handled once', async () => {
    await fill(1_000);
    const { w, claims, handled } = makeWorker(async () => {}, {}, { batchSize: 10, maxBatchSize: 80, concurrency: 8 });
    expect(await w.runUntilEmpty()).toBe(1_000);

    expect(claims.slice(0, 4)).toEqual([10, 20, 40, 80]);
    expect(Math.max(...claims)).toBe(80);
    expect(claims.reduce((a, b) => a + b, 0)).toBe(1_000);
    expect(handled.size).toBe(1_000);
    expect([...handled.values()].every((n) => n === 1)).toBe(true);
    expect(await notDone()).toBe(0);
  });

  it('a largest claim equal to the smallest keeps every claim at that size', async () => {
    await fill(200);
    const { w, claims } = makeWorker(async () => {}, {}, { batchSize: 10, maxBatchSize: 10, concurrency: 8 });
    expect(await w.runUntilEmpty()).toBe(200);
    expect(claims).toEqual(Array(20).fill(10));
  });

  it('does not grow while the handlers are what holds it back: claims that find messages still queued keep their size', async () => {
    // One slot, handlers of 60 ms: each claim comes back full, but finds the last one's messages
    // still waiting, so a larger claim would only make them wait longer here. Lease 1 s: a
    // message that waited more than 125 ms halves the next claim as well. Claiming ahead without
    // these rules doubled the claims up to 32 and 64.
    await fill(60);
    const { w, claims, handled } = makeWorker(() => sleep(60), { LEASE_SECONDS: '1' }, { batchSize: 2, maxBatchSize: 64, concurrency: 1 });
    await w.runUntilEmpty();
    expect(handled.size).toBe(60);
    expect(Math.max(...claims)).toBeLessThanOrEqual(8);
    expect(await notDone()).toBe(0);
  });
});
