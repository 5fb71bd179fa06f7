import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../src/config.ts';
import { createWorker, HandlerRegistry } from '../../src/outbox/index.ts';
import { eventsRelayHandlers } from '../../src/worker/handlers/events-relay.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { eventsEnv, freshStream, skipWithoutNats, useNats } from '../helpers/nats.ts';
import { bookingPayload, captureLogger, insertMessages, testHandler } from '../helpers/worker.ts';

/*
 * One downstream's outage must not hold up another's effects: with NATS down, each relay attempt
 * would wait EVENTS_PUBLISH_TIMEOUT_MS holding a worker slot, and the emails of the bookings behind
 * it would wait for the slots. The relay's circuit (src/events/circuit.ts) fails those attempts at
 * once while NATS is known to be down.
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
      const { rows } = await tdb.db.execute<{ n: number; err: string }>(
        sql`select count(*)::int as n, min(last_error) as err from outbox where status = 'PENDING' and 'email.stand-in' = any(handlers_done)`,
      );
      expect(rows[0]!.n).toBe(24); // every relay failed and will be retried; the emails are recorded done
      expect(rows[0]!.err).toMatch(/events\.relay: .*(unreachable|did not take)/);
    } finally {
      await nats.start();
      await registry.close();
    }
  }, 60_000);
});
