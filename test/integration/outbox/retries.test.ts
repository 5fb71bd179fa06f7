import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { PermanentError } from '../../../src/errors.ts';
import { createConfiguredWorker, runnerSettings, type ConfiguredWorkerOptions } from '../../../src/worker/outbox-worker.ts';
import {
  createWorker as createOutboxWorker,
  type OutcomeEvent,
  type PayloadSchema,
  backoffDelaySeconds,
  HandlerRegistry,
  type Handler,
} from '../../../src/outbox/index.ts';
import { emptyOutbox } from '../../../src/outbox/testing.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { getMessage, getMessages, insertMessage, insertMessages, makeDue, scheduledDelays } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { sleep, waitFor } from '../../helpers/wait.ts';
import { dbClock } from '../../helpers/db-clock.ts';

/*
 * The worker loop in-process against real Postgres: retries and backoff, dead letters, fan-out,
 * unknown topics, per-key order under concurrency, isolation, shutdown hand-back. Leases and the
 * heartbeat: test/integration/outbox/lease.test.ts.
 */

// Two workers claim side by side here: a claim that waited for a row lock instead of skipping it
// fails with a lock timeout rather than hanging (test/helpers/db.ts).
const tdb = useTestDatabase('wretry', { lockTimeoutMs: 5_000, truncate: 'outbox' });

function worker(handlers: Handler<any>[], env: Record<string, string> = {}, extra: Partial<ConfiguredWorkerOptions> = {}, level = 'info') {
  const { logger, entries } = captureLogger(level);
  const w = createConfiguredWorker({
    db: tdb.db,
    config: workerConfig(tdb, env),
    registry: new HandlerRegistry(handlers),
    logger,
    listen: false,
    housekeeping: false,
    ...extra,
  });
  const outcomes: OutcomeEvent[] = [];
  w.events.on('outcome', (e) => outcomes.push(e));
  return { w, outcomes, entries };
}

class Boom extends Error {
  override name = 'Boom';
}

describe('backoff and dead letters', () => {
  it('retries on the exact schedule 2, 4, 8, …, 128 with jitter off, and is DEAD after the 8th failure with last_error', async () => {
    let calls = 0;
    const { w, outcomes } = worker([
      testHandler('always-fails', 'test.fail', async () => {
        calls++;
        throw new Boom(`attempt ${calls} failed`);
      }),
    ]);
    const m = await insertMessage(tdb.db, 'test.fail');
    const scheduled: { min: number; max: number }[] = [];
    for (let attempt = 1; attempt <= 7; attempt++) {
      expect(await w.runOnce()).toBe(1);
      const settledBy = await dbClock(tdb.db);
      const row = await getMessage(tdb.db, m.id);
      expect(row).toMatchObject({ status: 'PENDING', attempts: attempt, claim_id: null });
      expect(row.last_error).toBe(`always-fails: Boom: attempt ${attempt} failed`);
      // Not due before its backoff ends…
      expect(await w.runOnce()).toBe(0);
      // The delay the settle added lies in this bracket, however long the run took.
      const [d] = await scheduledDelays(tdb.db, [m.id], settledBy);
      scheduled.push(d!);
      await makeDue(tdb.db, [m.id]); // …so skip the wait.
    }
    [2, 4, 8, 16, 32, 64, 128].forEach((expected, i) => {
      const d = scheduled[i]!;
      expect(expected, `attempt ${i + 1}: delay within [${d.min}, ${d.max}]`).toBeGreaterThanOrEqual(d.min);
      expect(expected, `attempt ${i + 1}: delay within [${d.min}, ${d.max}]`).toBeLessThanOrEqual(d.max);
    });

    expect(await w.runOnce()).toBe(1);
    const dead = await getMessage(tdb.db, m.id);
    expect(dead).toMatchObject({ status: 'DEAD', attempts: 8, last_error: 'always-fails: Boom: attempt 8 failed' });
    expect(dead.processed_at).not.toBeNull();
    expect(calls).toBe(8);
    await makeDue(tdb.db);
    expect(await w.runOnce()).toBe(0);
    expect(outcomes.map((o) => o.outcome)).toEqual([...Array(7).fill('retry'), 'dead']);
    expect(outcomes.map((o) => o.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    await w.stop();
  });

  it('with jitter on, every delay lies within [delay/2, delay] and they are not all the same', async () => {
    const { w } = worker(
      [
        testHandler('fails', 'test.fail', async () => {
          throw new Error('x');
        }),
      ],
      {
        BACKOFF_JITTER: 'true',
        MAX_ATTEMPTS: '20',
      },
    );
    const msgs = await insertMessages(
      tdb.db,
      Array.from({ length: 10 }, () => ({ topic: 'test.fail' })),
    );
    const ids = msgs.map((m) => m.id);
    for (let attempt = 1; attempt <= 9; attempt++) {
      await w.runOnce();
      const settledBy = await dbClock(tdb.db);
      const rows = await getMessages(tdb.db, ids);
      const full = backoffDelaySeconds(attempt, { baseSeconds: 2, maxSeconds: 256 });
      for (const r of rows) expect(r.attempts).toBe(attempt);
      // Each delay's bracket (settle between the claim and settledBy) meets [full/2, full]:
      // no tolerance for how long the run took.
      for (const d of await scheduledDelays(tdb.db, ids, settledBy)) {
        expect(d.max, `delay bracket [${d.min}, ${d.max}] vs [${full / 2}, ${full}]`).toBeGreaterThanOrEqual(full / 2);
        expect(d.min, `delay bracket [${d.min}, ${d.max}] vs [${full / 2}, ${full}]`).toBeLessThanOrEqual(full);
      }
      // Ten messages that failed together do not all retry at the same instant.
      expect(new Set(rows.map((r) => r.scheduled_after_claim!.toFixed(3))).size).toBeGreaterThan(5);
      await makeDue(tdb.db);
    }
    await w.stop();
  });

  it('a PermanentError is DEAD at once', async () => {
    const { w } = worker([
      testHandler('refuses', 'test.perm', async () => {
        throw new PermanentError('the property is gone');
      }),
    ]);
    const m = await insertMessage(tdb.db, 'test.perm');
    await w.runOnce();
    const row = await getMessage(tdb.db, m.id);
    expect(row).toMatchObject({ status: 'DEAD', attempts: 1, last_error: 'refuses: PermanentError: the property is gone' });
    expect(row.processed_at).not.toBeNull();
    await w.stop();
  });

  it('a payload that fails its topic schema is DEAD at once, and no handler runs', async () => {
    let ran = 0;
    const { w, outcomes } = worker([
      testHandler('email', 'booking.created', async () => {
        ran++;
      }),
    ]);
    const bad = await insertMessage(tdb.db, 'booking.created', { ...bookingPayload(), guestEmail: 'not an email', nights: -1 });
    await w.runOnce();
    const row = await getMessage(tdb.db, bad.id);
    expect(row).toMatchObject({ status: 'DEAD', attempts: 1 });
    expect(row.last_error).toMatch(/^payload: ZodError: does not match the booking.created schema: .*guestEmail.*nights/);
    expect(ran).toBe(0);
    expect(outcomes).toMatchObject([{ outcome: 'dead', handler: null }]);
    await w.stop();
  });

  it('the runner checks payloads with the schemas it is given, of any topic, and knows no other', async () => {
    const seen: Record<string, unknown[]> = {};
    const record = (topic: string) => async (ctx: { payload: unknown }) => void (seen[topic] ??= []).push(ctx.payload);
    const outbox = (payloadSchemas?: Readonly<Record<string, PayloadSchema>>) =>
      createOutboxWorker({
        ...runnerSettings(workerConfig(tdb)),
        db: tdb.db,
        registry: new HandlerRegistry([
          testHandler('shaped', 'test.shaped', record('test.shaped')),
          testHandler('free', 'test.free', record('test.free')),
          testHandler('email', 'booking.created', record('booking.created')),
        ]),
        logger: captureLogger().logger,
        payloadSchemas,
        listen: false,
        housekeeping: false,
      });
    const bad = await insertMessage(tdb.db, 'test.shaped', { n: 'two' });
    const good = await insertMessage(tdb.db, 'test.shaped', { n: 2, extra: true });
    const free = await insertMessage(tdb.db, 'test.free', { anything: ['goes'] });
    const w = outbox({ 'test.shaped': z.object({ n: z.number().int() }) });
    await w.runUntilEmpty();
    await w.stop();
    expect(await getMessage(tdb.db, bad.id)).toMatchObject({
      status: 'DEAD',
      last_error: expect.stringMatching(/test\.shaped schema: n /),
    });
    expect((await getMessages(tdb.db, [good.id, free.id])).map((r) => r.status)).toEqual(['DONE', 'DONE']);
    // Parsed by the given schema (unknown fields dropped); a topic without one gets the payload as stored.
    expect(seen['test.shaped']).toEqual([{ n: 2 }]);
    expect(seen['test.free']).toEqual([{ anything: ['goes'] }]);

    // Without the application's schemas the runner knows no topic: a payload the catalogue would refuse runs.
    const odd = await insertMessage(tdb.db, 'booking.created', { guestEmail: 'not an email' });
    const bare = outbox();
    await bare.runUntilEmpty();
    await bare.stop();
    expect(await getMessage(tdb.db, odd.id)).toMatchObject({ status: 'DONE' });
    expect(seen['booking.created']).toEqual([{ guestEmail: 'not an email' }]);
  });

  it("the failure rules are the application's: the bare runner retries an SMTP 5xx and keeps its text; this worker dead-letters it, addresses redacted", async () => {
    const refusal = () => Object.assign(new Error('550 <anna@example.test> unknown mailbox'), { responseCode: 550 });
    const handlers = () => [
      testHandler('refused', 'test.refused', async () => {
        throw refusal();
      }),
    ];
    const bare = createOutboxWorker({
      ...runnerSettings(workerConfig(tdb)),
      db: tdb.db,
      registry: new HandlerRegistry(handlers()),
      logger: captureLogger().logger,
      listen: false,
      housekeeping: false,
    });
    const first = await insertMessage(tdb.db, 'test.refused');
    await bare.runOnce();
    await bare.stop();
    expect(await getMessage(tdb.db, first.id)).toMatchObject({
      status: 'PENDING',
      last_error: 'refused: Error: 550 <anna@example.test> unknown mailbox',
    });

    await emptyOutbox(tdb.pool);
    const { w } = worker(handlers());
    const second = await insertMessage(tdb.db, 'test.refused');
    await w.runOnce();
    await w.stop();
    expect(await getMessage(tdb.db, second.id)).toMatchObject({
      status: 'DEAD',
      attempts: 1,
      last_error: 'refused: Error: 550 <[email]> unknown mailbox',
    });
  });

  it('a message whose claims keep ending without an outcome (a worker crashing each time) reaches DEAD', async () => {
    let ran = 0;
    const { w } = worker([
      testHandler('crashes', 'test.crash', async () => {
        ran++;
      }),
    ]);
    const m = await insertMessage(tdb.db, 'test.crash');
    // Eight claims whose workers died: attempts were counted at each claim, no outcome was recorded.
    await tdb.db.execute(sql`update outbox set attempts = 8 where id = ${m.id}`);
    await w.runOnce();
    const row = await getMessage(tdb.db, m.id);
    expect(row.status).toBe('DEAD');
    expect(row.last_error).toMatch(/^worker: NoOutcome: claimed 8 times without an outcome/);
    expect(ran).toBe(0);
    await w.stop();
  });
});

describe('fan-out', () => {
  it('when the host handler fails and the guest one succeeds, the retry runs only the host handler', async () => {
    const calls = { guest: 0, host: 0 };
    const { w, outcomes } = worker([
      testHandler('guest', 'test.fanout', async () => {
        calls.guest++;
      }),
      testHandler('host', 'test.fanout', async () => {
        calls.host++;
        if (calls.host === 1) throw new Error('smtp hiccup');
      }),
    ]);
    const m = await insertMessage(tdb.db, 'test.fanout');
    await w.runOnce();
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'PENDING', attempts: 1, handlers_done: ['guest'] });
    expect(outcomes.map((o) => [o.handler, o.outcome])).toEqual([
      ['guest', 'done'],
      ['host', 'retry'],
    ]);
    await makeDue(tdb.db);
    await w.runOnce();
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'DONE', attempts: 2, handlers_done: ['guest', 'host'] });
    expect(calls).toEqual({ guest: 1, host: 2 });
    await w.stop();
  });

  it("a handler that fails does not stop the message's other handlers from running", async () => {
    const ran: string[] = [];
    const { w } = worker([
      testHandler('first', 'test.fanout', async () => {
        ran.push('first');
        throw new Error('down');
      }),
      testHandler('second', 'test.fanout', async () => {
        ran.push('second');
      }),
    ]);
    const m = await insertMessage(tdb.db, 'test.fanout');
    await w.runOnce();
    expect(ran).toEqual(['first', 'second']);
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'PENDING', handlers_done: ['second'] });
    await w.stop();
  });
});

describe('unknown topics', () => {
  it('stay PENDING with attempts unchanged, are looked at again after the recheck delay, and are delivered once a handler exists', async () => {
    // A recheck delay no slow machine can outlast within the test; its end is time travel below.
    const a = worker([testHandler('email', 'booking.created')], { UNKNOWN_TOPIC_RECHECK_SECONDS: '60' });
    const m = await insertMessage(tdb.db, 'test.unregistered', { hello: 1 });

    expect(await a.w.runOnce()).toBe(1);
    const settledBy = await dbClock(tdb.db);
    let row = await getMessage(tdb.db, m.id);
    expect(row).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null, last_error: null });
    const [d] = await scheduledDelays(tdb.db, [m.id], settledBy);
    expect(60, `recheck delay within [${d!.min}, ${d!.max}]`).toBeGreaterThanOrEqual(d!.min);
    expect(60, `recheck delay within [${d!.min}, ${d!.max}]`).toBeLessThanOrEqual(d!.max);
    // Not on every poll: until the recheck delay is over, it is not claimed again.
    expect(await a.w.runOnce()).toBe(0);
    const warnings = a.entries().filter((e) => e.level === 40 && e.topic === 'test.unregistered');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.knownTopics).toEqual(['booking.created']);
    expect(String(warnings[0]!.msg)).toContain('known: booking.created');

    // The delay over (time travel, not a sleep): it is looked at again.
    await makeDue(tdb.db, [m.id]);
    expect(await a.w.runOnce()).toBe(1); // re-checked after the delay
    row = await getMessage(tdb.db, m.id);
    expect(row).toMatchObject({ status: 'PENDING', attempts: 0 });
    expect(a.outcomes.map((o) => o.outcome)).toEqual(['unknown_topic', 'unknown_topic']);
    await a.w.stop();

    // A deploy adds the handler.
    const seen: unknown[] = [];
    const b = worker([
      testHandler('late-handler', 'test.unregistered', async ({ payload }) => {
        seen.push(payload);
      }),
    ]);
    await makeDue(tdb.db);
    expect(await b.w.runOnce()).toBe(1);
    expect(await getMessage(tdb.db, m.id)).toMatchObject({ status: 'DONE', attempts: 1 });
    expect(seen).toEqual([{ hello: 1 }]);
    await b.w.stop();
  });
});

describe('isolation and order', () => {
  it('commits each message on its own: one failure does not undo or repeat the others', async () => {
    const runs = new Map<string, number>();
    const { w } = worker(
      [
        testHandler('h', 'test.mixed', async ({ payload, messageId }) => {
          runs.set(messageId, (runs.get(messageId) ?? 0) + 1);
          if ((payload as { fail?: boolean }).fail) throw new Error('this one fails');
        }),
      ],
      {},
      { concurrency: 4 },
    );
    const msgs = await insertMessages(tdb.db, [
      { topic: 'test.mixed', payload: {} },
      { topic: 'test.mixed', payload: { fail: true } },
      { topic: 'test.mixed', payload: {} },
      { topic: 'test.mixed', payload: {} },
    ]);
    await w.runOnce();
    await makeDue(tdb.db);
    await w.runOnce();
    const rows = await getMessages(
      tdb.db,
      msgs.map((m) => m.id),
    );
    expect(rows.map((r) => r.status)).toEqual(['DONE', 'PENDING', 'DONE', 'DONE']);
    expect(rows.map((r) => runs.get(r.public_id))).toEqual([1, 2, 1, 1]);
    await w.stop();
  });

  it('keeps per-key order under concurrency (two workers, 8 handlers each in flight), keys in parallel', async () => {
    // More keys than one worker can hold (2 × batch + concurrency = 28 claimed at most), so the
    // first worker, however fast, always leaves keys due for the second.
    const keys = 40;
    const perKey = 8;
    const order = new Map<string, number[]>();
    const inFlight = new Set<string>();
    let overlap = 0;
    let maxParallel = 0;
    // No handler runs until both workers have started one: without this gate the worker whose
    // claim connection opened first could drain everything alone on a busy machine, and the test
    // would no longer be about two workers. If one never gets a message the gate opens after 10 s
    // and the assertions below fail.
    const started = new Set<string>();
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
      setTimeout(resolve, 10_000).unref();
    });
    const handlerOf = (workerName: string) =>
      testHandler('ordered', 'test.ordered', async ({ payload, key }) => {
        started.add(workerName);
        if (started.size === 2) openGate();
        await gate;
        if (inFlight.has(key!)) overlap++;
        inFlight.add(key!);
        maxParallel = Math.max(maxParallel, inFlight.size);
        await sleep(Math.random() * 15);
        order.set(key!, [...(order.get(key!) ?? []), (payload as unknown as { seq: number }).seq]);
        inFlight.delete(key!);
      });
    const msgs = [];
    for (let seq = 0; seq < perKey; seq++) {
      for (let k = 0; k < keys; k++) msgs.push({ topic: 'test.ordered', key: `k${k}`, payload: { seq } });
    }
    await insertMessages(tdb.db, msgs);
    // Polling every 10 ms (no LISTEN here): a worker whose claim found every due message taken
    // looks again soon, instead of sleeping a second while the other drains everything alone.
    const w1 = worker([handlerOf('w1')], { POLL_INTERVAL_MS: '10' }, { concurrency: 8, batchSize: 10 });
    const w2 = worker([handlerOf('w2')], { POLL_INTERVAL_MS: '10' }, { concurrency: 8, batchSize: 10 });
    await Promise.all([w1.w.start(), w2.w.start()]);
    await waitFor(
      async () => {
        const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status = 'DONE'`);
        return rows[0]!.n === keys * perKey;
      },
      30_000,
      'all messages DONE',
    );
    await Promise.all([w1.w.stop(), w2.w.stop()]);
    // Every claim succeeded: none waited for the other worker's rows until its lock timeout.
    expect([...w1.entries(), ...w2.entries()].filter((e) => e.msg === 'claim failed')).toEqual([]);
    expect(overlap).toBe(0);
    expect(maxParallel).toBeGreaterThan(1);
    for (let k = 0; k < keys; k++) expect(order.get(`k${k}`)).toEqual([...Array(perKey).keys()]);
    // Both workers did some of it.
    expect([...started].sort()).toEqual(['w1', 'w2']);
    expect(w1.w.summary().done).toBeGreaterThan(0);
    expect(w2.w.summary().done).toBeGreaterThan(0);
    expect(w1.w.summary().done + w2.w.summary().done).toBe(keys * perKey);
  });
});

describe('stopping', () => {
  it('finishes the handler in flight and hands back what was claimed but not started', async () => {
    let started = 0;
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const { w, outcomes } = worker(
      [
        testHandler('slow', 'test.slow', async () => {
          started++;
          await gate;
        }),
      ],
      {},
      { concurrency: 1, batchSize: 5 },
    );
    const msgs = await insertMessages(
      tdb.db,
      Array.from({ length: 5 }, () => ({ topic: 'test.slow' })),
    );
    await w.start();
    await waitFor(async () => started === 1, 30_000, 'first handler to start');
    // Stop is asked while the handler is still running; the handler finishes only afterwards.
    const stopping = w.stop();
    finish();
    const summary = await stopping;
    expect(started).toBe(1);
    expect(summary).toMatchObject({ claimed: 5, done: 1, handedBack: 4 });
    const rows = await getMessages(
      tdb.db,
      msgs.map((m) => m.id),
    );
    expect(rows[0]).toMatchObject({ status: 'DONE', attempts: 1 });
    for (const r of rows.slice(1)) {
      expect(r).toMatchObject({ status: 'PENDING', attempts: 0, claim_id: null });
      expect(r.due_in).toBeLessThanOrEqual(0);
    }
    expect(outcomes.filter((o) => o.outcome === 'handed_back')).toHaveLength(4);
  });
});

describe('logging', () => {
  it('at debug, logs one line per handler outcome with id, topic, handler, attempt, outcome, duration, and no email address', async () => {
    const { w, entries } = worker(
      [
        testHandler('guest', 'booking.created', async () => {}),
        testHandler('host', 'booking.created', async () => {
          throw Object.assign(new Error("Can't send mail - all recipients were rejected: 550 <host@example.test>: no such user"), {
            code: 'EENVELOPE',
            responseCode: 550,
          });
        }),
      ],
      {},
      {},
      'debug',
    );
    const m = await insertMessage(tdb.db, 'booking.created', bookingPayload());
    await w.runOnce();
    const lines = entries().filter((e) => e.msg === 'outbox handler outcome');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ messageId: m.public_id, topic: 'booking.created', handler: 'guest', attempt: 1, outcome: 'done' });
    expect(lines[1]).toMatchObject({ handler: 'host', outcome: 'dead' });
    expect(typeof lines[0]!.durationMs).toBe('number');
    const all = entries()
      .map((e) => JSON.stringify(e))
      .join('\n');
    expect(all).not.toMatch(/@example\.test/);
    const row = await getMessage(tdb.db, m.id);
    expect(row.last_error).toBe("host: Error(EENVELOPE): Can't send mail - all recipients were rejected: 550 <[email]>: no such user");
    await w.stop();
  });
});

describe('logging at info (the default)', () => {
  it('logs no line per successful message, failures still one each', async () => {
    const { w, entries } = worker([
      testHandler('ok', 'test.ok', async () => {}),
      testHandler('bad', 'test.bad', async () => {
        throw new Boom('nope');
      }),
    ]);
    await insertMessages(tdb.db, [{ topic: 'test.ok' }, { topic: 'test.ok' }, { topic: 'test.bad' }]);
    await w.runOnce();
    const lines = entries().filter((e) => e.msg === 'outbox handler outcome');
    expect(lines.map((l) => [l.handler, l.outcome])).toEqual([['bad', 'retry']]);
    expect(w.summary()).toMatchObject({ claimed: 3, done: 2, retried: 1 });
    await w.stop();
  });
});
