import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { loadConfig, type Config } from '../../src/config.ts';
import { buildApp, type AppContext } from '../../src/http/app.ts';
import { loggerOptions } from '../../src/logger.ts';
import { afterAll, beforeAll, expect } from 'vitest';
import { createTestDatabase, type TestDatabase } from './db.ts';

/** Everything the app logged, one parsed JSON object per line. */
export class LogCapture extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void) {
    this.lines.push(...chunk.toString().split('\n').filter(Boolean));
    done();
  }
  get text() {
    return this.lines.join('\n');
  }
}

export interface TestApp {
  app: FastifyInstance;
  config: Config;
  logs: LogCapture;
}

export function testConfig(db: TestDatabase, env: Record<string, string> = {}): Config {
  return loadConfig({
    DATABASE_URL: db.url,
    LOG_LEVEL: 'info',
    RATE_LIMIT_AUTH_PER_MINUTE: '100000',
    SIGNUPS_PER_ADDRESS_PER_DAY: '1000000',
    BACKOFF_JITTER: 'false',
    // The app runs inside the test process: its event loop and pool are the test's too, so load
    // shedding would refuse requests by how busy the test runner is. Its own tests turn it on.
    LOAD_SHEDDING: 'false',
    MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), `stayhub-mail-${db.name}-`)),
    ...env,
  });
}

export async function buildTestApp(
  db: TestDatabase,
  env: Record<string, string> = {},
  extra: Partial<Omit<AppContext, 'config' | 'db'>> = {},
): Promise<TestApp> {
  const config = testConfig(db, env);
  const logs = new LogCapture();
  const logger = pino({ ...loggerOptions(config.LOG_LEVEL), transport: undefined }, logs);
  const app = await buildApp({ config, logger, db, ...extra });
  await app.ready();
  return { app, config, logs };
}

export const uniqueEmail = (tag = 'user') => `${tag}-${randomBytes(5).toString('hex')}@example.test`;

export interface Session {
  token: string;
  user: { id: string; email: string; name: string; role: string };
  auth: { authorization: string };
}

export async function signUp(app: FastifyInstance, role: 'guest' | 'host', name = `A ${role}`): Promise<Session> {
  const res = await app.inject({
    method: 'POST',
    url: '/auth/register',
    payload: { email: uniqueEmail(role), password: 'correct horse battery', name, role },
  });
  if (res.statusCode !== 201) throw new Error(`sign-up failed: ${res.statusCode} ${res.body}`);
  const body = res.json();
  return { token: body.token, user: body.user, auth: { authorization: `Bearer ${body.token}` } };
}

export const propertyInput = (overrides: Record<string, unknown> = {}) => ({
  title: 'Sea-view flat in Porto',
  description: 'Two rooms, a balcony over the Douro.',
  city: 'Porto',
  country: 'PT',
  currency: 'EUR',
  nightlyPrice: 10_000,
  cleaningFee: 2_500,
  maxGuests: 4,
  ...overrides,
});

export async function listProperty(app: FastifyInstance, host: Session, overrides: Record<string, unknown> = {}) {
  const res = await app.inject({ method: 'POST', url: '/properties', headers: host.auth, payload: propertyInput(overrides) });
  if (res.statusCode !== 201) throw new Error(`create property failed: ${res.statusCode} ${res.body}`);
  return res.json() as { id: string; [k: string]: unknown };
}

/** 'YYYY-MM-DD', `days` from today (UTC). */
export function daysFromNow(days: number): string {
  const d = new Date();
  d.setUTCDate(d.getUTCDate() + days);
  return d.toISOString().slice(0, 10);
}

/** `guest` books `propertyId` for `nights` nights from `inDays` days from now: the answer as it came, for the test to judge. */
export function book(app: FastifyInstance, guest: Session, stay: { propertyId: string; inDays: number; nights: number; guests?: number }) {
  const { propertyId, inDays, nights, guests = 1 } = stay;
  return app.inject({
    method: 'POST',
    url: '/bookings',
    headers: guest.auth,
    payload: { propertyId, checkIn: daysFromNow(inDays), checkOut: daysFromNow(inDays + nights), guests },
  });
}

/** `n` two-night stays four days apart, booked by a new guest on a new property of `host`: each a 201, or the test fails. */
export async function bookStays(app: FastifyInstance, host: Session, n: number, property: Record<string, unknown> = {}) {
  const guest = await signUp(app, 'guest');
  const p = await listProperty(app, host, { currency: 'EUR', ...property });
  const bookings: { id: string; total: number }[] = [];
  for (let i = 0; i < n; i++) {
    const res = await book(app, guest, { propertyId: p.id, inDays: 10 + i * 4, nights: 2 });
    expect(res.statusCode, res.body).toBe(201);
    bookings.push({ id: res.json().id, total: res.json().price.total });
  }
  return { guest, bookings };
}

/**
 * A test file's own database and app: created before its tests, closed and dropped after (the drop
 * fails if a connection leaked). Read `t.db`, `t.app`, `t.logs`, `t.config` inside tests and hooks.
 */
export function useTestApp(env: Record<string, string> = {}, extra: Partial<Omit<AppContext, 'config' | 'db'>> = {}) {
  let db: TestDatabase | undefined;
  let built: TestApp | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    built = await buildTestApp(db, env, extra);
  });
  afterAll(async () => {
    await built?.app.close();
    await db?.drop();
  });
  const ready = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('useTestApp: used before its beforeAll ran');
    return v;
  };
  return {
    get db() {
      return ready(db);
    },
    get app() {
      return ready(built).app;
    },
    get logs() {
      return ready(built).logs;
    },
    get config() {
      return ready(built).config;
    },
  };
}
