import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../../src/config.ts';
import { MAX_COOL_DOWN_MS } from '../../../src/events/circuit.ts';
import { EventsUnavailableError } from '../../../src/events/errors.ts';
import { createJetStreamPublisher } from '../../../src/events/publisher.ts';
import { relayMessage } from '../../../src/events/relay.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { eventsRelayHandlers } from '../../../src/worker/handlers/events-relay.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import type { OutcomeEvent } from '../../../src/outbox/index.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { sleep, waitFor } from '../../helpers/wait.ts';

/*
 * One downstream's outage must not hold up another's effects:
 * - with NATS down, each relay attempt would wait EVENTS_PUBLISH_TIMEOUT_MS holding a worker slot,
 *   and the emails of the bookings behind it would wait for the slots. The relay's circuit
 *   (src/events/circuit.ts) fails those attempts at once while NATS is known to be down;
 * - a booking's cancellation would wait behind the relay retries of its booking.created (per-key
 *   order is per message). The relay keeps its own lane (src/outbox/lanes.ts): its retries hold
 *   only the key's later events, which still reach the stream in order once NATS is back;
 * - a hung NATS (SIGSTOP) answers nothing and refuses nothing: the circuit learns it from silence;
 * - NATS away is not the messages' fault: their relay is postponed, no attempt spent, so an outage
 *   of any length leaves them PENDING, never DEAD.
 *
 * Slow (about 30 s alone): the outages are a real nats-server stopped or SIGSTOPped, and the circuit
 * learns of them from the client's own timeouts.
 */

const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.ceil(xs.length * 0.95) - 1]!;

const skip = skipWithoutNats();
const tdb = useTestDatabase('evoutage', { truncate: 'outbox' });
const nats = useNats(skip);

describe.skipIf(skip)('a NATS outage', () => {
  it("does not delay other handlers' effects: the emails of 24 bookings go out while every relay attempt fails", async () => {
    const PUBLISH_TIMEOUT_MS = 3000;
    const config = loadConfig({
      ...eventsEnv(tdb.url, nats.url, freshStream('O'), {}),
      EVENTS_PUBLISH_TIMEOUT_MS: String(PUBLISH_TIMEOUT_MS),
      EVENTS_TOPICS: 'booking.created',
      BACKOFF_JITTER: 'false',
      BACKOFF_BASE_SECONDS: '60', // failed relays wait out the test
      LOG_LEVEL: 'warn',
    });
    const { logger } = captureLogger('warn');
    const emailed: number[] = [];
    const relay = eventsRelayHandlers({ config, logger });
    const registry = new HandlerRegistry([
      // Stands for the guest's email: the effect that must not wait for NATS.
      testHandler('email.stand-in', 'booking.created', async () => void emailed.push(Date.now())),
      ...relay,
    ]);
    await registry.prepare(); // connected, stream created
    await nats.stop();
    try {
      await insertMessages(
        tdb.db,
        Array.from({ length: 24 }, (_, i) => ({ topic: 'booking.created', key: `booking-${i}`, payload: bookingPayload() })),
      );
      const worker = createConfiguredWorker({
        db: tdb.db,
        config,
        registry,
        logger,
        concurrency: 4,
        batchSize: 4,
        listen: false,
        housekeeping: false,
      });
      const started = Date.now();
      await worker.runUntilEmpty();
      await worker.stop();
      expect(emailed).toHaveLength(24);
      // Timing is the behaviour here. Without the circuit each relay attempt held its slot for the
      // publish timeout: 24 messages / 4 slots × 3 s ≈ 18 s before the last email. With it, the
      // emails take what emails take.
      expect(Math.max(...emailed) - started).toBeLessThan(PUBLISH_TIMEOUT_MS);
      // Every booking's message is done; every relay failed and waits in its lane to be retried.
      const { rows } = await tdb.db.execute<{ lane: string | null; status: string; n: number; err: string | null }>(
        sql`select lane, status, count(*)::int as n, min(last_error) as err from outbox group by lane, status order by lane nulls first`,
      );
      expect(rows.map((r) => [r.lane, r.status, r.n])).toEqual([
        [null, 'DONE', 24],
        ['events.relay', 'PENDING', 24],
      ]);
      expect(rows[1]!.err).toMatch(/events\.relay: DependencyUnavailableError: NATS at .*(unreachable|not answering).*waits in the outbox/);
    } finally {
      await nats.start();
      await registry.close();
    }
  }, 60_000);

  it("does not hold a cancellation's emails behind its booking's relay retries, and the stream still gets both in order", async () => {
    const stream = freshStream('C');
    const config = loadConfig({
      ...eventsEnv(tdb.url, nats.url, stream, {}),
      EVENTS_PUBLISH_TIMEOUT_MS: '2000',
      EVENTS_TOPICS: 'booking.created,booking.cancelled',
      BACKOFF_JITTER: 'false',
      BACKOFF_BASE_SECONDS: '60',
      LOG_LEVEL: 'warn',
    });
    const { logger } = captureLogger('warn');
    const emailed: string[] = [];
    const registry = new HandlerRegistry([
      testHandler('email.created-stand-in', 'booking.created', async ({ topic }) => void emailed.push(topic)),
      testHandler('email.cancelled-stand-in', 'booking.cancelled', async ({ topic }) => void emailed.push(topic)),
      ...eventsRelayHandlers({ config, logger }),
    ]);
    await registry.prepare();
    const worker = createConfiguredWorker({ db: tdb.db, config, registry, logger, listen: false, housekeeping: false });
    const payload = bookingPayload();
    await nats.stop();
    let created: string | undefined;
    let cancelled: string | undefined;
    try {
      [created] = (await insertMessages(tdb.db, [{ topic: 'booking.created', key: payload.bookingId, payload }])).map((m) => m.public_id);
      await worker.runUntilEmpty();
      [cancelled] = (
        await insertMessages(tdb.db, [
          { topic: 'booking.cancelled', key: payload.bookingId, payload: { ...payload, cancelledBy: 'guest' } },
        ])
      ).map((m) => m.public_id);
      await worker.runUntilEmpty();
      // Both emails went out while NATS was down; before the lane, the cancellation's waited for
      // booking.created's relay to succeed or go DEAD (up to the whole retry span).
      expect(emailed).toEqual(['booking.created', 'booking.cancelled']);
    } finally {
      await nats.start();
    }
    try {
      // Until the relay has reconnected and its circuit closed, a retry fails at once: retry until then.
      await waitFor(
        async () => {
          await tdb.db.execute(sql`update outbox set available_at = now(), leased_until = null where status = 'PENDING'`);
          await worker.runUntilEmpty();
          const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status = 'PENDING'`);
          return rows[0]!.n === 0 || (await sleep(200), false);
        },
        30_000,
        'the lane to drain once NATS is back',
      );
      await worker.stop();
      const events = await readStream(nats.url, stream);
      expect(events.map((e) => e.msgId)).toEqual([created!, cancelled!]);
      const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
      expect(rows[0]!.n).toBe(0);
    } finally {
      await registry.close();
    }
  }, 60_000);
  it("a hung NATS (SIGSTOP) does not slow the guests' emails: p95 within 1.5x of their pace beside a healthy one", async () => {
    const EMAIL_MS = 150; // an SMTP round trip
    const EVERY_MS = 100; // a booking every 100 ms
    const stream = freshStream('H');
    const config = loadConfig({
      ...eventsEnv(tdb.url, nats.url, stream, {}),
      EVENTS_TOPICS: 'booking.created',
      // The defaults a hang meets in production: a 5 s publish timeout, a 500 ms stall.
      EVENTS_PUBLISH_TIMEOUT_MS: '5000',
      EVENTS_STALL_MS: '500',
      BACKOFF_BASE_SECONDS: '1',
      BACKOFF_MAX_SECONDS: '3',
      LOG_LEVEL: 'error',
    });
    const { logger } = captureLogger('error');
    const insertedAt = new Map<string, number>();
    const latency = new Map<string, number>();
    const registry = new HandlerRegistry([
      // Stands for the guest's email; it runs before the relay, as the real emails do.
      testHandler('email.stand-in', 'booking.created', async ({ payload }) => {
        await sleep(EMAIL_MS);
        const id = (payload as { bookingId: string }).bookingId;
        latency.set(id, Date.now() - insertedAt.get(id)!);
      }),
      ...eventsRelayHandlers({ config, logger }),
    ]);
    await registry.prepare();
    const worker = createConfiguredWorker({ db: tdb.db, config, registry, logger, concurrency: 8, listen: false, housekeeping: false });
    await worker.start();
    const book = async (n: number) => {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const payload = bookingPayload();
        insertedAt.set(payload.bookingId, Date.now());
        await insertMessages(tdb.db, [{ topic: 'booking.created', key: payload.bookingId, payload }]);
        ids.push(payload.bookingId);
        await sleep(EVERY_MS);
      }
      await waitFor(async () => ids.every((id) => latency.has(id)), 30_000, 'the emails');
      return ids.map((id) => latency.get(id)!);
    };
    let healthy: number[];
    let hung: number[];
    try {
      healthy = await book(40);
      nats.pause();
      try {
        hung = await book(100); // about 12 s of hang, the publish timeout twice over
      } finally {
        nats.resume();
      }
      // Every event reaches the stream once NATS answers again: none DEAD, none lost, no attempt spent on the hang.
      await waitFor(
        async () => {
          const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
          return rows[0]!.n === 0 || (await sleep(200), false);
        },
        30_000,
        'every relay to be done once NATS is back',
      );
    } finally {
      await worker.stop();
      await registry.close();
    }
    console.info(`email latency p95: ${p95(healthy)} ms beside a healthy NATS, ${p95(hung)} ms beside a hung one`);
    // Timing is the behaviour here: a hung NATS must cost the guests' emails no more than half
    // again their pace beside a healthy one. Before the stall and the single probe, every relay
    // sent in the first timeout of the hang held its slot for 5 s, and the emails queued behind.
    expect(p95(hung)).toBeLessThanOrEqual(1.5 * p95(healthy));
    const events = await readStream(nats.url, stream);
    expect(events).toHaveLength(140);
    expect(new Set(events.map((e) => e.msgId)).size).toBe(140);
  }, 90_000);

  it('an outage of many more relay tries than MAX_ATTEMPTS leaves every event PENDING, then relays them all, none DEAD', async () => {
    const stream = freshStream('D');
    const config = loadConfig({
      ...eventsEnv(tdb.url, nats.url, stream, {}),
      EVENTS_TOPICS: 'booking.created',
      MAX_ATTEMPTS: '3',
      BACKOFF_BASE_SECONDS: '0.05',
      BACKOFF_MAX_SECONDS: '0.2', // a postponement waits at most this long: dozens of tries in the outage
      LOG_LEVEL: 'error',
    });
    const { logger } = captureLogger('error');
    const registry = new HandlerRegistry([
      testHandler('email.stand-in', 'booking.created', async () => undefined),
      ...eventsRelayHandlers({ config, logger }),
    ]);
    await registry.prepare();
    const postponed = new Map<string, number>();
    const worker = createConfiguredWorker({ db: tdb.db, config, registry, logger, listen: false, housekeeping: false });
    worker.events.on('outcome', (e: OutcomeEvent) => {
      if (e.outcome === 'postponed') postponed.set(e.messageId, (postponed.get(e.messageId) ?? 0) + 1);
    });
    await nats.stop();
    let messages: { public_id: string }[] = [];
    try {
      try {
        // Keyed ones relay from their lane; the ones without a key are postponed as a whole message.
        messages = await insertMessages(tdb.db, [
          ...Array.from({ length: 6 }, () => ({ topic: 'booking.created', key: `booking-${Math.random()}`, payload: bookingPayload() })),
          ...Array.from({ length: 2 }, () => ({ topic: 'booking.created', key: null, payload: bookingPayload() })),
        ]);
        await worker.start();
        await waitFor(
          // Counted per outbox row: the 6 lane rows and the 2 messages without a key (a keyed
          // original is postponed once, as its relay moves into the lane).
          async () => [...postponed.values()].filter((n) => n > 3 * 3).length === 8,
          30_000,
          'every relay to be tried more than three times MAX_ATTEMPTS',
        );
        const { rows } = await tdb.db.execute<{ status: string; attempts: number; last_error: string | null }>(
          sql`select status, attempts, last_error from outbox where lane is not null or key is null`,
        );
        expect(rows).toHaveLength(8);
        for (const r of rows) {
          expect(r.status).toBe('PENDING');
          expect(r.attempts).toBeLessThanOrEqual(1); // at most the claim in flight, given back when it settles
          expect(r.last_error).toMatch(/^events\.relay: DependencyUnavailableError: NATS at \S+ is unreachable.*waits in the outbox/);
        }
      } finally {
        await nats.start();
      }
      await waitFor(
        async () => {
          const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
          return rows[0]!.n === 0 || (await sleep(100), false);
        },
        20_000,
        'every relay to be done once NATS is back',
      );
    } finally {
      await worker.stop();
      await registry.close();
    }
    const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status = 'DEAD'`);
    expect(rows[0]!.n).toBe(0);
    const events = await readStream(nats.url, stream);
    expect(events.map((e) => e.msgId).sort()).toEqual(messages.map((m) => m.public_id).sort());
  }, 60_000);
  it('a reconnect closes the circuit at once: the first publish after it goes through, no cool-down waited', async () => {
    const config = loadConfig({ ...eventsEnv(tdb.url, nats.url, freshStream('R'), {}), EVENTS_TOPICS: 'booking.created' });
    const { logger } = captureLogger('error');
    const publisher = createJetStreamPublisher(config, logger);
    const relay = () =>
      relayMessage(publisher, config, {
        messageId: crypto.randomUUID(),
        topic: 'booking.created',
        key: null,
        occurredAt: new Date(),
        payload: bookingPayload(),
      });
    await publisher.prepare();
    try {
      await relay();
      await nats.stop();
      // Tried again and again through the outage (each a failure for want of NATS), as the worker would.
      const until = Date.now() + 3_000;
      let failures = 0;
      while (Date.now() < until) {
        await expect(relay()).rejects.toBeInstanceOf(EventsUnavailableError);
        failures++;
        await sleep(50);
      }
      expect(failures).toBeGreaterThan(10);
      await nats.start();
      const back = performance.now();
      await waitFor(
        () =>
          relay().then(
            () => true,
            () => sleep(20).then(() => false),
          ),
        10_000,
        'a publish to go through',
      );
      // Timing is the behaviour: the client reconnects within its 0.5 s wait, and the reconnect
      // closes the circuit then, not after a cool-down (up to MAX_COOL_DOWN_MS; 30 s before).
      expect(performance.now() - back).toBeLessThan(MAX_COOL_DOWN_MS / 2);
    } finally {
      await publisher.close();
    }
  }, 30_000);
});
