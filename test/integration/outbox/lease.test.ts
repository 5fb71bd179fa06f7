import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { ClaimConnection, markDoneMany } from '../../../src/outbox/testing.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { getMessage, getMessages, insertMessage, insertMessages, makeDue } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A message runs in one worker at a time: a prefetched message never starts with too little of its
 * lease left (it is handed back instead), the heartbeat keeps the lease of a running handler alive
 * however long it runs, and every settle matches on (id, claim id).
 *
 * The tests wait for the conditions themselves (a handler held on a gate, the database's clock
 * past a deadline), never for a stretch of wall-clock time, so a busy machine only makes them
 * slower. The claims run with a lock_timeout (test/helpers/db.ts): a claim that waited for a row
 * lock instead of skipping it fails at once instead of hanging.
 */

const tdb = useTestDatabase('wlease', { lockTimeoutMs: 5_000, truncate: 'outbox' });

/** A gate a handler waits on until the test opens it. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

function makeWorker(
  handle: Parameters<typeof testHandler>[2],
  env: Record<string, string>,
  opts: { batchSize?: number; concurrency?: number } = {},
) {
  const { logger, entries } = captureLogger();
  const w = createConfiguredWorker({
    db: tdb.db,
    config: workerConfig(tdb, env),
    registry: new HandlerRegistry([testHandler('slow', 'test.slow', handle)]),
    logger,
    listen: false,
    housekeeping: false,
    ...opts,
  });
  const outcomes: string[] = [];
  w.events.on('outcome', (e) => outcomes.push(e.outcome));
  return { w, outcomes, entries };
}

/**
 * Worker A (one slot, claims two) whose handler holds its slot until `first` opens, worker B that
 * runs anything at once, and two messages: A starts the first and queues the second.
 */
async function slotHeldByA(leaseMs: number, onStart: () => void = () => {}) {
  const runs: { worker: string; id: string }[] = [];
  const first = gate();
  const env = { LEASE_SECONDS: String(leaseMs / 1000) };
  const a = makeWorker(
    async (ctx) => {
      runs.push({ worker: 'A', id: ctx.messageId });
      onStart();
      await first.opened;
    },
    env,
    { batchSize: 2, concurrency: 1 },
  );
  const b = makeWorker(async (ctx) => void runs.push({ worker: 'B', id: ctx.messageId }), env);
  const [m1, m2] = await insertMessages(tdb.db, [{ topic: 'test.slow' }, { topic: 'test.slow' }]);
  return { runs, first, a, b, m1: m1!, m2: m2! };
}

/** Waits until the database's clock has passed `claimed_at + seconds` of message `id`. */
async function untilDbClockPast(id: number, seconds: number, what: string) {
  await waitFor(
    async () => {
      const { rows } = await tdb.pool.query<{ past: boolean }>(
        'select clock_timestamp() > claimed_at + make_interval(secs => $2) as past from outbox where id = $1',
        [id, seconds],
      );
      return rows[0]!.past;
    },
    60_000,
    what,
  );
}

describe('a prefetched message and its lease', () => {
  it('one slot, batch 2: the second message, left with less than half its lease, is handed back (attempt not counted) and a second worker runs it', async () => {
    // Worker A claims both and has one slot; the first handler holds the slot until more than half
    // of the lease has passed since it started, so since the claim was sent. The second message
    // must not start then: its lease could end mid-handler, and a second worker would run it in
    // parallel. 4 s: the first message itself must start within half a lease of the claim (the
    // claim connection is opened in that time too), which a busy machine can stretch.
    const LEASE_MS = 4_000;
    let firstStartedAt = 0;
    const { runs, first, a, b, m1, m2 } = await slotHeldByA(LEASE_MS, () => (firstStartedAt ||= Date.now()));

    const aDone = a.w.runOnce();
    try {
      await waitFor(async () => runs.length === 1, 60_000, 'the first handler to start');
      // The claim was sent before the first handler started: once half a lease has passed since
      // then, the second message has less than half of its lease left, on the worker's own clock.
      await waitFor(async () => Date.now() - firstStartedAt > LEASE_MS / 2 + 50, 60_000, 'half the lease to pass');
    } finally {
      first.open();
    }
    expect(await aDone).toBe(2);
    expect(runs).toEqual([{ worker: 'A', id: m1.public_id }]);
    const [r1, r2] = await getMessages(tdb.db, [m1.id, m2.id]);
    expect(r1).toMatchObject({ status: 'DONE', attempts: 1 });
    expect(r2).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
    expect(r2!.due_in).toBeLessThanOrEqual(0); // handed back due at once: nobody waits for its lease
    expect(a.outcomes.sort()).toEqual(['done', 'handed_back']);
    expect(a.w.summary()).toMatchObject({ claimed: 2, done: 1, handedBack: 1 });

    // The second worker takes it at once and runs it: each message ran once, in one worker.
    expect(await b.w.runOnce()).toBe(1);
    expect(runs).toEqual([
      { worker: 'A', id: m1.public_id },
      { worker: 'B', id: m2.public_id },
    ]);
    expect(await getMessage(tdb.db, m2.id)).toMatchObject({ status: 'DONE', attempts: 1 });
    await Promise.all([a.w.stop(), b.w.stop()]);
  });
  it('every slot held past a whole lease: the queued message goes back before its lease ends, so it never spends an attempt unstarted', async () => {
    // Worker A's one slot is held far longer than a lease (a handler waiting on a server that
    // hangs). The second message waits in A's queue; it must go back while its lease still runs,
    // not when the slot frees: by then another worker would have claimed it again, A's hand-back
    // (fenced on A's claim) would match nothing, and the attempt A's claim counted would stay
    // counted: enough of those and a message is dead-lettered without ever having run.
    // 4 s, as above: the first message must start with half its lease left, on a busy machine too.
    const LEASE_MS = 4_000;
    const { runs, first, a, b, m1, m2 } = await slotHeldByA(LEASE_MS);

    const aDone = a.w.runOnce();
    try {
      await waitFor(async () => runs.length === 1, 60_000, 'the first handler to start');
      // While A's handler still holds its slot: the second message is back, unclaimed, its attempt given back.
      const back = await waitFor(
        async () => {
          const r = await getMessage(tdb.db, m2.id);
          return r.claim_id === null && r;
        },
        3 * LEASE_MS,
        'the queued message to be handed back while the slot is held',
      );
      expect(back).toMatchObject({ status: 'PENDING', attempts: 0 });
      expect(runs).toHaveLength(1);
      // The second worker runs it as its first attempt, A's handler still running.
      expect(await b.w.runOnce()).toBe(1);
      expect(await getMessage(tdb.db, m2.id)).toMatchObject({ status: 'DONE', attempts: 1 });
    } finally {
      first.open();
    }
    expect(await aDone).toBe(2);
    expect(runs).toEqual([
      { worker: 'A', id: m1.public_id },
      { worker: 'B', id: m2.public_id },
    ]);
    expect(a.outcomes.sort()).toEqual(['done', 'handed_back']);
    await Promise.all([a.w.stop(), b.w.stop()]);
  });
});

describe('the heartbeat', () => {
  it('a handler that outlives LEASE_SECONDS keeps its claim: a second worker claims nothing while it runs', async () => {
    // 3 s: a beat every 0.75 s, each landing with 2.25 s of the lease left, which a busy machine
    // may delay a timer by without the lease running out.
    const LEASE_SECONDS = 3;
    let runs = 0;
    const slow = gate();
    const a = makeWorker(
      async () => {
        runs++;
        await slow.opened;
      },
      { LEASE_SECONDS: String(LEASE_SECONDS) },
    );
    const b = makeWorker(async () => void runs++, { LEASE_SECONDS: String(LEASE_SECONDS) });
    const m = await insertMessage(tdb.db, 'test.slow');
    const aDone = a.w.runOnce();
    try {
      await waitFor(async () => runs === 1, 60_000, 'the handler to start');
      const { claim_id: claimId } = await getMessage(tdb.db, m.id);

      // Past the lease the claim took, then past the lease of its first extension (a quarter of a
      // lease later): without the heartbeat, or with a single beat, the message would be due here.
      for (const past of [LEASE_SECONDS, LEASE_SECONDS * 1.5]) {
        await untilDbClockPast(m.id, past + 0.1, `${past} s past the claim`);
        expect(await b.w.runOnce(), `claimed by a second worker ${past} s after the first claimed it`).toBe(0);
        const row = await getMessage(tdb.db, m.id);
        expect(row).toMatchObject({ status: 'PENDING', attempts: 1, claim_id: claimId });
        expect(row.due_in).toBeGreaterThan(0);
      }
    } finally {
      slow.open();
    }
    expect(await aDone).toBe(1);
    expect(runs).toBe(1);
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'DONE', attempts: 1 });
    expect(a.entries().filter((e) => Number(e.level) >= 40)).toEqual([]); // no failed extension, no superseded claim
    await Promise.all([a.w.stop(), b.w.stop()]);
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
