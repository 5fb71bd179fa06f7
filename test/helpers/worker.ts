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

export type MessageRow = {
  id: number;
  public_id: string;
  topic: string;
  key: string | null;
  status: 'PENDING' | 'DONE' | 'DEAD';
  attempts: number;
  handlers_done: string[];
  claim_id: string | null;
  last_error: string | null;
  processed_at: Date | null;
  /** Seconds from now until it may be claimed: available_at, or a lease's end (negative when due). */
  due_in: number;
  /** available_at − claimed_at in seconds: the delay a settle scheduled, counted from the claim. */
  scheduled_after_claim: number | null;
};

/**
 * Writes messages straight into the table (any topic, even one no handler or schema knows), as
 * `enqueue` would but outside the API: the worker is what is under test here.
 */
export async function insertMessages(db: Db, messages: { topic: string; payload?: unknown; key?: string | null }[]): Promise<MessageRow[]> {
  const ids: number[] = [];
  for (let i = 0; i < messages.length; i += 1000) {
    const chunk = messages.slice(i, i + 1000);
    const { rows } = await db.execute<{ id: string }>(sql`
      insert into outbox (topic, key, payload)
      select t, k, p::jsonb
        from unnest(${sql.param(chunk.map((m) => m.topic))}::text[],
                    ${sql.param(chunk.map((m) => m.key ?? null))}::text[],
                    ${sql.param(chunk.map((m) => JSON.stringify(m.payload ?? {})))}::text[])
             with ordinality as x(t, k, p, n)
       order by n
      returning id`);
    ids.push(...rows.map((r) => Number(r.id)));
  }
  return ids.length ? getMessages(db, ids) : [];
}

export async function insertMessage(db: Db, topic: string, payload: unknown = {}, key: string | null = null): Promise<MessageRow> {
  return (await insertMessages(db, [{ topic, payload, key }]))[0]!;
}

export async function getMessages(db: Db, ids: number[]): Promise<MessageRow[]> {
  const { rows } = await db.execute<MessageRow>(sql`
    select id::int as id, public_id, topic, key, status, attempts, handlers_done, claim_id, last_error, processed_at,
           extract(epoch from greatest(available_at, leased_until) - now())::float8 as due_in,
           extract(epoch from available_at - claimed_at)::float8 as scheduled_after_claim
      from outbox where id = any(${sql.param(ids)}::bigint[]) order by id`);
  return rows;
}

export async function getMessage(db: Db, id: number): Promise<MessageRow> {
  return (await getMessages(db, [id]))[0]!;
}

/** Time travel: makes PENDING messages (all, or the given ones) due now, as if their wait (backoff or lease) were over. */
export async function makeDue(db: Db, ids?: number[]): Promise<void> {
  await db.execute(
    ids
      ? sql`update outbox set available_at = now(), leased_until = null where status = 'PENDING' and id = any(${sql.param(ids)}::bigint[])`
      : sql`update outbox set available_at = now(), leased_until = null where status = 'PENDING'`,
  );
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

/**
 * The backoff a settle scheduled, bracketed without wall-clock slack: the settle ran after the
 * claim and before `settledBy` (a `dbClock` read once the run was over), so the delay it added
 * to its own now() lies within [available_at − settledBy, available_at − claimed_at] seconds.
 */
export async function scheduledDelays(db: Db, ids: number[], settledBy: string): Promise<{ id: number; min: number; max: number }[]> {
  const { rows } = await db.execute<{ id: number; min: number; max: number }>(sql`
    select id::int as id,
           extract(epoch from available_at - ${settledBy}::timestamptz)::float8 as min,
           extract(epoch from available_at - claimed_at)::float8 as max
      from outbox where id = any(${sql.param(ids)}::bigint[]) order by id`);
  return rows;
}
