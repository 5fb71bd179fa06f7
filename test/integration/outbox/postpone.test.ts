import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { DependencyUnavailableError, HandlerRegistry, type Handler } from '../../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import type { OutcomeEvent } from '../../../src/outbox/index.ts';
import { createWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { getMessage, insertMessage, makeDue, scheduledDelays } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { dbClock } from '../../helpers/db-clock.ts';

/*
 * The postponed outcome, on its own (no NATS): a handler that says its downstream is away
 * (DependencyUnavailableError) leaves its message PENDING with the attempt given back, for a
 * capped wait, however many times it happens. The relay's use of it: stream/outage-emails.test.ts.
 */

const tdb = useTestDatabase('wpostpone', { truncate: 'outbox' });

function worker(handlers: Handler<any>[], env: Record<string, string> = {}) {
  const { logger } = captureLogger('warn');
  const w = createConfiguredWorker({
    db: tdb.db,
    config: workerConfig(tdb, { MAX_ATTEMPTS: '2', BACKOFF_BASE_SECONDS: '2', BACKOFF_MAX_SECONDS: '30', ...env }),
    registry: new HandlerRegistry(handlers),
    logger,
    listen: false,
    housekeeping: false,
  });
  const outcomes: OutcomeEvent[] = [];
  w.events.on('outcome', (e) => outcomes.push(e));
  return { w, outcomes };
}

const away = (seconds?: number) =>
  new DependencyUnavailableError('the broker is away: the message waits for it', { retryAfterSeconds: seconds });

describe('a handler whose downstream is away', () => {
  it('is postponed, not counted: PENDING after MAX_ATTEMPTS × 3 tries, waiting as asked up to BACKOFF_MAX_SECONDS', async () => {
    const asked = [5, 3600, undefined, 5, 5, 5];
    let calls = 0;
    const { w, outcomes } = worker([
      testHandler('broker', 'test.away', async () => {
        calls++;
        throw away(asked[calls - 1]);
      }),
    ]);
    const metrics = createWorkerMetrics(w.events);
    const m = await insertMessage(tdb.db, 'test.away');
    const waits: { min: number; max: number }[] = [];
    for (let i = 0; i < asked.length; i++) {
      expect(await w.runOnce()).toBe(1);
      const settledBy = await dbClock(tdb.db);
      const row = await getMessage(tdb.db, m.id);
      expect(row).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
      expect(row.last_error).toBe('broker: DependencyUnavailableError: the broker is away: the message waits for it');
      waits.push((await scheduledDelays(tdb.db, [m.id], settledBy))[0]!);
      expect(await w.runOnce()).toBe(0); // not due before its wait ends
      await makeDue(tdb.db, [m.id]);
    }
    expect(calls).toBe(6);
    // Asked 5 s: 5; asked an hour: the cap, 30; asked nothing: the first backoff step, 2.
    [5, 30, 2].forEach((expected, i) => {
      expect(waits[i]!.min).toBeLessThanOrEqual(expected + 0.01);
      expect(waits[i]!.max).toBeGreaterThanOrEqual(expected - 0.01);
    });
    expect(outcomes.map((o) => o.outcome)).toEqual(Array(6).fill('postponed'));
    expect(outcomes.every((o) => o.attempt === 1)).toBe(true); // the claim's count, given back each time
    expect(w.summary()).toMatchObject({ postponed: 6, retried: 0, dead: 0 });
    expect(await metrics.registry.getSingleMetricAsString('stayhub_worker_handler_outcomes_total')).toContain(
      'stayhub_worker_handler_outcomes_total{topic="test.away",handler="broker",outcome="postponed"} 6',
    );
    metrics.detach();
    await w.stop();
  });

  it("beside a failure of the message's own, the attempt counts and the message can go DEAD", async () => {
    const { w } = worker([
      testHandler('broker', 'test.mixed', async () => {
        throw away(1);
      }),
      testHandler('mail', 'test.mixed', async () => {
        throw new Error('451 try later');
      }),
    ]);
    const m = await insertMessage(tdb.db, 'test.mixed');
    await w.runOnce();
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'PENDING', attempts: 1 });
    await makeDue(tdb.db, [m.id]);
    await w.runOnce();
    const row = await getMessage(tdb.db, m.id);
    expect(row).toMatchObject({ status: 'DEAD', attempts: 2 });
    expect(row.last_error).toBe(
      'broker: DependencyUnavailableError: the broker is away: the message waits for it | mail: Error: 451 try later',
    );
    await w.stop();
  });

  it('an own-lane handler postponed on a keyed message moves into its lane with no attempt spent; the others go on', async () => {
    let up = false;
    const sent: string[] = [];
    const { w } = worker([
      testHandler('mail', 'test.lane', async () => void sent.push('mail')),
      {
        ...testHandler('broker', 'test.lane', async () => {
          if (!up) throw away(7);
        }),
        ownLane: true,
      },
    ]);
    const m = await insertMessage(tdb.db, 'test.lane', {}, 'k-1');
    await w.runOnce();
    expect(sent).toEqual(['mail']);
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'DONE' });
    const lane = async () =>
      (
        await tdb.db.execute<{ id: number; attempts: number; last_error: string; wait: number }>(
          sql`select id::int as id, attempts, last_error, extract(epoch from available_at - now())::float8 as wait
                from outbox where lane = 'broker'`,
        )
      ).rows;
    const [row] = await lane();
    expect(row).toMatchObject({
      attempts: 0,
      last_error: 'broker: DependencyUnavailableError: the broker is away: the message waits for it',
    });
    expect(row!.wait).toBeGreaterThan(5);
    expect(row!.wait).toBeLessThanOrEqual(7);
    for (let i = 0; i < 3; i++) {
      await makeDue(tdb.db, [row!.id]);
      expect(await w.runOnce()).toBe(1);
      expect((await lane())[0]).toMatchObject({ attempts: 0 });
    }
    up = true;
    await makeDue(tdb.db, [row!.id]);
    await w.runOnce();
    expect(await getMessage(tdb.db, row!.id)).toMatchObject({ status: 'DONE', attempts: 1 });
    await w.stop();
  });
});
