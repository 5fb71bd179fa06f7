import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../src/config.ts';
import { createWorker, HandlerRegistry } from '../../src/outbox/index.ts';
import { eventsRelayHandlers } from '../../src/worker/handlers/events-relay.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../helpers/nats.ts';
import { bookingPayload, captureLogger, insertMessages, sleep, testHandler, waitFor } from '../helpers/worker.ts';

/*
 * One downstream's outage must not hold up another's effects:
 * - with NATS down, each relay attempt would wait EVENTS_PUBLISH_TIMEOUT_MS holding a worker slot,
 *   and the emails of the bookings behind it would wait for the slots. The relay's circuit
 *   (src/events/circuit.ts) fails those attempts at once while NATS is known to be down;
 * - a booking's cancellation would wait behind the relay retries of its booking.created (per-key
 *   order is per message). The relay keeps its own lane (src/outbox/lanes.ts): its retries hold
 *   only the key's later events, which still reach the stream in order once NATS is back.
 */

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
      const worker = createWorker({
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
      expect(rows[1]!.err).toMatch(/events\.relay: .*(unreachable|did not take)/);
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
    const worker = createWorker({ db: tdb.db, config, registry, logger, listen: false, housekeeping: false });
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
});
