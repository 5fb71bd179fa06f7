import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { PermanentError } from '../../../src/errors.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import type { OutcomeEvent } from '../../../src/outbox/index.ts';
import { HandlerRegistry, type Handler } from '../../../src/outbox/index.ts';
import { deferToLanes, claimOn } from '../../../src/outbox/testing.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { insertMessage, makeDue } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';

/*
 * Handler lanes (src/outbox/lanes.ts): an own-lane handler's failure holds only its own later work
 * of the key. The other handlers of the message, and of the key's later messages, go on; the
 * own-lane handler still sees the key's messages in order once it recovers.
 */

const tdb = useTestDatabase('lanes', { truncate: 'outbox' });

const TOPIC = 'test.lanes';

/** `effect` runs every message; `downstream` keeps its own lane and fails while `down` is set. */
function handlers(opts: { ownLane?: boolean } = {}) {
  const state = { down: true, permanent: false, effects: [] as string[], downstream: [] as string[], downstreamCalls: 0 };
  const effect = testHandler('effect', TOPIC, async ({ messageId }) => {
    state.effects.push(messageId);
  });
  const downstream: Handler<any> = {
    ...testHandler('downstream', TOPIC, async ({ messageId }) => {
      state.downstreamCalls++;
      if (state.permanent) throw new PermanentError('refused for good');
      if (state.down) throw new Error('downstream is away');
      state.downstream.push(messageId);
    }),
    ownLane: opts.ownLane ?? true,
  };
  return { state, list: [effect, downstream] };
}

function worker(list: Handler<any>[]) {
  const { logger } = captureLogger();
  const w = createConfiguredWorker({
    db: tdb.db,
    config: workerConfig(tdb, { MAX_ATTEMPTS: '3' }),
    registry: new HandlerRegistry(list),
    logger,
    listen: false,
    housekeeping: false,
  });
  const outcomes: OutcomeEvent[] = [];
  w.events.on('outcome', (e) => outcomes.push(e));
  return { w, outcomes };
}

type Row = {
  public_id: string;
  key: string | null;
  status: string;
  attempts: number;
  lane: string | null;
  origin_id: string | null;
  handlers_done: string[];
  last_error: string | null;
  created_at: string;
};

async function rows(): Promise<Row[]> {
  const { rows } = await tdb.db.execute<Row>(
    sql`select public_id, key, status, attempts, lane, origin_id, handlers_done, last_error, created_at from outbox order by id`,
  );
  return rows;
}

describe('an own-lane handler that fails', () => {
  it("moves only its own work into its lane: the message is DONE and the key's next message runs at once", async () => {
    const { state, list } = handlers();
    const first = await insertMessage(tdb.db, TOPIC, {}, 'booking-1');
    const second = await insertMessage(tdb.db, TOPIC, {}, 'booking-1');
    const { w, outcomes } = worker(list);

    await w.runUntilEmpty();

    // Both messages' other handler ran: the second did not wait for the first's failing handler.
    expect(state.effects).toEqual([first.public_id, second.public_id]);
    const after = await rows();
    const originals = after.filter((r) => r.lane === null);
    expect(originals.map((r) => r.status)).toEqual(['DONE', 'DONE']);
    expect(originals.every((r) => r.handlers_done.includes('downstream'))).toBe(true);

    // The lane: the key's work for that handler, in the key's order, keyed apart from the key itself.
    const lane = after.filter((r) => r.lane !== null);
    expect(lane.map((r) => [r.lane, r.key, r.origin_id, r.status])).toEqual([
      ['downstream', 'downstream@booking-1', first.public_id, 'PENDING'],
      ['downstream', 'downstream@booking-1', second.public_id, 'PENDING'],
    ]);
    // The first failed once and says why; the second never ran (its lane was busy).
    expect(lane[0]).toMatchObject({ attempts: 1, last_error: 'downstream: Error: downstream is away' });
    expect(lane[1]).toMatchObject({ attempts: 0, last_error: null });
    expect(state.downstreamCalls).toBe(1);
    // A lane row keeps its original's time: its age is the event's.
    expect(lane[0]!.created_at).toBe(originals[0]!.created_at);
    expect(outcomes.filter((o) => o.handler === 'downstream').map((o) => o.outcome)).toEqual(['retry']);
  });

  it('runs the lane in order once the downstream is back, with the original ids', async () => {
    const { state, list } = handlers();
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push((await insertMessage(tdb.db, TOPIC, {}, 'booking-2')).public_id);
    const { w } = worker(list);
    await w.runUntilEmpty();
    expect(state.effects).toEqual(ids);

    state.down = false;
    await makeDue(tdb.db);
    await w.runUntilEmpty();

    expect(state.downstream).toEqual(ids);
    expect((await rows()).every((r) => r.status === 'DONE')).toBe(true);
  });

  it("holds only its own key's lane: another key's handler runs directly", async () => {
    const { state, list } = handlers();
    await insertMessage(tdb.db, TOPIC, {}, 'booking-3');
    const { w } = worker(list);
    await w.runUntilEmpty();
    state.down = false;
    const other = await insertMessage(tdb.db, TOPIC, {}, 'booking-4');

    await w.runUntilEmpty();

    // booking-4's work ran in place; booking-3's lane waits for its backoff.
    expect(state.downstream).toEqual([other.public_id]);
    const lane = (await rows()).filter((r) => r.lane !== null);
    expect(lane.map((r) => [r.key, r.status])).toEqual([['downstream@booking-3', 'PENDING']]);
  });

  it('dead-letters the lane message after its last attempt with the error kept; the key then runs in place again', async () => {
    const { state, list } = handlers();
    // An older message that stays PENDING (a topic nobody handles): the claim looks for a busy lane
    // only among rows no older than the oldest PENDING one, so without it the DEAD lane row below
    // (which keeps its original's time) would never be looked at, whatever the rule said of DEAD.
    await insertMessage(tdb.db, 'test.nobody-handles-this', {}, 'other-key');
    const first = await insertMessage(tdb.db, TOPIC, {}, 'booking-5');
    const { w } = worker(list);
    await w.runUntilEmpty();
    for (let i = 0; i < 3; i++) {
      await makeDue(tdb.db);
      await w.runUntilEmpty();
    }
    const lane = (await rows()).filter((r) => r.lane !== null);
    expect(lane).toHaveLength(1);
    expect(lane[0]).toMatchObject({ status: 'DEAD', attempts: 3, origin_id: first.public_id });
    expect(lane[0]!.last_error).toContain('downstream is away');

    // DEAD does not hold a lane, as it does not hold a key: the next message's work runs in place.
    state.down = false;
    const next = await insertMessage(tdb.db, TOPIC, {}, 'booking-5');
    const after = await rows();
    // The DEAD lane row is within the span the claim searches: older PENDING work came before it.
    const oldestPending = after.filter((r) => r.status === 'PENDING').sort((a, b) => a.created_at.localeCompare(b.created_at))[0]!;
    expect(oldestPending.created_at <= lane[0]!.created_at).toBe(true);
    await w.runUntilEmpty();
    expect(state.downstream).toEqual([next.public_id]);
    expect((await rows()).filter((r) => r.lane !== null)).toHaveLength(1);
  });

  it('does not defer a permanent failure: the message dead-letters as before', async () => {
    const { state, list } = handlers();
    state.permanent = true;
    await insertMessage(tdb.db, TOPIC, {}, 'booking-6');
    const { w } = worker(list);
    await w.runUntilEmpty();
    const all = await rows();
    expect(all.map((r) => [r.lane, r.status])).toEqual([[null, 'DEAD']]);
    expect(all[0]!.last_error).toContain('refused for good');
  });

  it('does not defer the work of a message without a key: it retries as a whole', async () => {
    const { list } = handlers();
    await insertMessage(tdb.db, TOPIC, {}, null);
    const { w } = worker(list);
    await w.runUntilEmpty();
    const all = await rows();
    expect(all.map((r) => [r.lane, r.status, r.handlers_done])).toEqual([[null, 'PENDING', ['effect']]]);
  });
});

describe('without a lane', () => {
  it("holds the key's next message while the handler retries (what an own lane avoids)", async () => {
    const { state, list } = handlers({ ownLane: false });
    const first = await insertMessage(tdb.db, TOPIC, {}, 'booking-7');
    await insertMessage(tdb.db, TOPIC, {}, 'booking-7');
    const { w } = worker(list);
    await w.runUntilEmpty();
    expect(state.effects).toEqual([first.public_id]);
    expect((await rows()).filter((r) => r.lane !== null)).toHaveLength(0);
  });
});

describe('the lane write', () => {
  it('is fenced on the claim and written once: a superseded claim or a second write adds no lane row', async () => {
    const m = await insertMessage(tdb.db, TOPIC, {}, 'booking-8');
    const [claimed] = await claimOn(tdb.pool, { limit: 1, leaseSeconds: 30, claimId: crypto.randomUUID(), lanes: ['downstream'] });
    expect(claimed!.id).toBe(m.id);
    const deferral = { handler: 'downstream', delaySeconds: 0, attempts: 0, error: null };

    expect(await deferToLanes(tdb.db, m.id, crypto.randomUUID(), [deferral])).toBe(false);
    expect(await deferToLanes(tdb.db, m.id, claimed!.claimId, [deferral])).toBe(true);
    expect(await deferToLanes(tdb.db, m.id, claimed!.claimId, [deferral])).toBe(false);

    expect((await rows()).filter((r) => r.lane !== null)).toHaveLength(1);
  });

  it("is reported by the claim: a message whose key's lane holds work is told which lanes are busy", async () => {
    const m = await insertMessage(tdb.db, TOPIC, {}, 'booking-9');
    const [c1] = await claimOn(tdb.pool, { limit: 1, leaseSeconds: 30, claimId: crypto.randomUUID(), lanes: ['downstream'] });
    expect(c1!.lanesBusy).toEqual([]);
    await deferToLanes(tdb.db, m.id, c1!.claimId, [{ handler: 'downstream', delaySeconds: 600, attempts: 1, error: 'x' }]);
    await tdb.db.execute(sql`update outbox set status = 'DONE', claim_id = null where id = ${m.id}`);
    const next = await insertMessage(tdb.db, TOPIC, {}, 'booking-9');

    const [c2] = await claimOn(tdb.pool, { limit: 5, leaseSeconds: 30, claimId: crypto.randomUUID(), lanes: ['downstream'] });
    expect(c2).toMatchObject({ id: next.id, lanesBusy: ['downstream'], lane: null, eventId: next.public_id });
    // Without own-lane handlers the claim asks nothing.
    await tdb.db.execute(sql`update outbox set leased_until = null, claim_id = null where id = ${next.id}`);
    const [c3] = await claimOn(tdb.pool, { limit: 5, leaseSeconds: 30, claimId: crypto.randomUUID() });
    expect(c3).toMatchObject({ id: next.id, lanesBusy: [] });
  });
});
