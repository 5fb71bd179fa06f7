import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { sql } from 'drizzle-orm';
import { loadConfig, type Config } from '../../src/config.ts';
import type { Db } from '../../src/db/client.ts';
import type { Logger } from '../../src/logger.ts';
import type { PayloadOf, TopicName } from '../../src/messages/topics.ts';
import type { Handler, HandlerContext } from '../../src/messages/handler.ts';
import { LogCapture } from './app.ts';
import type { TestDatabase } from './db.ts';
import { getMessages, insertMessages, type MessageRow } from '../../src/outbox/testing.ts';

/** Worker settings for tests: exact backoff (no jitter), quick polls, mail to a temporary folder. */
export function workerConfig(db: Pick<TestDatabase, 'url'>, env: Record<string, string> = {}): Config {
  return loadConfig({
    DATABASE_URL: db.url,
    LOG_LEVEL: 'info',
    BACKOFF_JITTER: 'false',
    POLL_INTERVAL_MS: '50',
    MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
    ...env,
  });
}

/** A logger whose lines the test can read (`logs.lines`, JSON). */
export function captureLogger(level = 'info'): { logger: Logger; logs: LogCapture; entries: () => Record<string, unknown>[] } {
  const logs = new LogCapture();
  const logger = pino({ level }, logs);
  return { logger, logs, entries: () => logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

/** A complete, valid booking.created payload; override what the test cares about. */
export function bookingPayload(overrides: Partial<PayloadOf<'booking.created'>> = {}): PayloadOf<'booking.created'> {
  const bookingId = overrides.bookingId ?? randomUUID();
  return {
    bookingId,
    propertyId: randomUUID(),
    propertyTitle: 'Cabin by the lake',
    guestEmail: 'guest@example.test',
    guestName: 'Gina Guest',
    hostEmail: 'host@example.test',
    hostName: 'Hal Host',
    checkIn: '2026-12-04',
    checkOut: '2026-12-07',
    guests: 2,
    nights: 3,
    total: 45_678,
    currency: 'EUR',
    idempotencyKey: `booking-created:${bookingId}`,
    ...overrides,
  };
}

export { getMessages, insertMessages, makeDue, scheduledDelays, type MessageRow } from '../../src/outbox/testing.ts';

export async function insertMessage(db: Db, topic: string, payload: unknown = {}, key: string | null = null): Promise<MessageRow> {
  return (await insertMessages(db, [{ topic, payload, key }]))[0]!;
}

export async function getMessage(db: Db, id: number): Promise<MessageRow> {
  return (await getMessages(db, [id]))[0]!;
}

/** A handler for tests; topics outside TOPICS have no payload schema and are allowed here. */
export function testHandler(
  name: string,
  topic: string,
  handle: (ctx: HandlerContext<TopicName>) => Promise<void> = async () => {},
): Handler<any> {
  return { name, topic: topic as TopicName, handle };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Polls `check` until it returns a truthy value, or fails after `timeoutMs`: a guard against a
 * hang, not a speed check, so it is generous (a loaded two-core machine is several times slower).
 */
export async function waitFor<T>(check: () => Promise<T | undefined | false>, timeoutMs = 30_000, what = 'condition'): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

/** The database's clock right now (clock_timestamp, microseconds), to order events against rows. */
export async function dbClock(db: Db): Promise<string> {
  const { rows } = await db.execute<{ t: string }>(sql`select clock_timestamp()::text as t`);
  return rows[0]!.t;
}
