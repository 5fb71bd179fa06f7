import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pgTypes from 'pg';
import { createDatabase, createPool, type Database } from '../../../src/db/client.ts';
import { PostgresSearchIndex } from '../../../src/search/postgres-search-index.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, book, listProperty, signUp, type TestApp } from '../../helpers/app.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { getMessage, insertMessage, makeDue } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * Regression tests for bugs the chaos run (npm run chaos) found. Each names the run's symptom.
 */

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('chaosreg');
});
afterAll(async () => {
  await db?.drop();
});

/**
 * Checks out a client of `pool`, kills its backend during a query, and returns what escaped:
 * errors that reached process 'uncaughtException' (each one would have crashed a worker or the API).
 */
async function killCheckedOutClient(pool: pgTypes.Pool, applicationName: string): Promise<unknown[]> {
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => uncaught.push(err);
  process.prependListener('uncaughtException', onUncaught);
  try {
    const client = await pool.connect();
    // The socket's end comes after the error message; the client's error event, the one that
    // must not crash the process, is emitted just before 'end'.
    const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
    // Settled into a value at once, so its rejection is never "unhandled" while we wait.
    const running = client.query('select pg_sleep(30)').then(
      () => null,
      (err: unknown) => err,
    );
    await waitFor(
      async () => {
        const { rowCount } = await db.pool.query(
          `select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1 and query like '%pg_sleep(30)%'`,
          [applicationName],
        );
        return (rowCount ?? 0) > 0;
      },
      30_000,
      'the sleeping query to be killed',
    );
    expect(await running).toMatchObject({ code: '57P01' });
    let deadline: NodeJS.Timeout | undefined;
    await Promise.race([
      ended,
      new Promise((_, reject) => {
        deadline = setTimeout(() => reject(new Error('the killed connection never ended')), 30_000);
      }),
    ]).finally(() => clearTimeout(deadline));
    client.release(new Error('connection lost'));
    // The pool recovers: the broken client was discarded, a new connection works.
    const { rows } = await pool.query('select 1 as ok');
    expect(rows[0].ok).toBe(1);
    return uncaught;
  } finally {
    process.off('uncaughtException', onUncaught);
  }
}

describe('connection killed while a client is checked out (chaos: pg_terminate_backend / Postgres restart)', () => {
  it('the application pool: the query rejects, no uncaught error event crashes the process', async () => {
    const pool = createPool(db.url, { max: 1, applicationName: 'stayhub-checked-out' });
    try {
      expect(await killCheckedOutClient(pool, 'stayhub-checked-out')).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it("the search index's own pool: same (chaos: a worker exited with code 1 on an unheard 57P01)", async () => {
    const index = new PostgresSearchIndex({ url: db.url, max: 1, applicationName: 'stayhub-search-checked-out' });
    try {
      expect(await killCheckedOutClient(index.pool, 'stayhub-search-checked-out')).toEqual([]);
    } finally {
      await index.close();
    }
  });
});

describe('database outage → 503, never 500 (chaos: a Postgres restart gave clients 500s)', () => {
  it('answers 503 service_unavailable with Retry-After when the database cannot be reached', async () => {
    // A pool pointed at a port nobody listens on: every query fails with ECONNREFUSED.
    const nowhere: Database = createDatabase('postgres://postgres:x@127.0.0.1:1/nowhere', { max: 1 });
    const t = await buildTestApp({ ...db, ...nowhere } as TestDatabase);
    try {
      const login = await t.app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'a@b.test', password: 'whatever-long' } });
      expect(login.statusCode, login.body).toBe(503);
      expect(login.json().code).toBe('service_unavailable');
      expect(login.headers['retry-after']).toBe('1');

      const authed = await t.app.inject({ method: 'GET', url: '/bookings', headers: { authorization: `Bearer ${'a'.repeat(43)}` } });
      expect(authed.statusCode, authed.body).toBe(503);
    } finally {
      await t.app.close();
      await nowhere.close();
    }
  });

  it('answers 503 when its connection is terminated mid-request (57P01, as in a fast shutdown)', async () => {
    const appDb = createDatabase(db.url, { max: 2, applicationName: 'stayhub-api-57p01' });
    const t: TestApp = await buildTestApp({ ...db, ...appDb } as TestDatabase);
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      const host = await signUp(t.app, 'host');
      const guest = await signUp(t.app, 'guest');
      const property = await listProperty(t.app, host);
      const booked = await book(t.app, guest, { propertyId: property.id, inDays: 5, nights: 2 });
      expect(booked.statusCode).toBe(201);
      const bookingId = booked.json().id as string;

      // Hold the booking's row lock so the cancel waits inside its transaction, then kill its backend.
      await holder.query('begin');
      await holder.query('select 1 from bookings where public_id = $1 for update', [bookingId]);
      const pending = t.app.inject({ method: 'POST', url: `/bookings/${bookingId}/cancel`, headers: guest.auth });
      const pid = await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ pid: number }>(
            `select pid from pg_stat_activity where application_name = 'stayhub-api-57p01' and wait_event_type = 'Lock'`,
          );
          return rows[0]?.pid;
        },
        30_000,
        'the cancel to wait on the row lock',
      );
      await db.pool.query('select pg_terminate_backend($1)', [pid]);
      const res = await pending;
      expect(res.statusCode, res.body).toBe(503);
      expect(res.json().code).toBe('service_unavailable');
      await holder.query('rollback');

      // Nothing was half-done: the booking is still confirmed and no cancellation event exists;
      // the client's retry then succeeds.
      const { rows } = await db.pool.query(`select count(*)::int as n from outbox where topic = 'booking.cancelled'`);
      expect(rows[0].n).toBe(0);
      const retry = await t.app.inject({ method: 'POST', url: `/bookings/${bookingId}/cancel`, headers: guest.auth });
      expect(retry.statusCode, retry.body).toBe(200);
      expect(retry.json().status).toBe('cancelled');
    } finally {
      await holder.end();
      await t.app.close();
      await appDb.close();
    }
  });
});

describe("a permanent failure does not cancel another handler's retry (chaos: host emails lost for 550 guests)", () => {
  it('retries the transiently failed handler; DEAD only once nothing but permanent failures remain', async () => {
    const smtpError = (code: number) => Object.assign(new Error(`reply ${code}`), { code: 'EENVELOPE', responseCode: code });
    let hostCalls = 0;
    let guestCalls = 0;
    const { logger } = captureLogger();
    const w = createConfiguredWorker({
      db: db.db,
      config: workerConfig(db),
      registry: new HandlerRegistry([
        // The guest's mailbox does not exist: 550, every time.
        testHandler('email.guest', 'booking.created', async () => {
          guestCalls++;
          throw smtpError(550);
        }),
        // The host's server is busy once (451), then accepts.
        testHandler('email.host', 'booking.created', async () => {
          hostCalls++;
          if (hostCalls === 1) throw smtpError(451);
        }),
      ]),
      logger,
      listen: false,
      housekeeping: false,
    });
    try {
      // Only this test's message: earlier tests in this file left events behind.
      await db.pool.query('truncate outbox');
      const m = await insertMessage(db.db, 'booking.created', bookingPayload(), 'k-550-451');
      await w.runOnce();
      // Not DEAD: the host's email failed transiently and must be retried, whatever the guest's did.
      expect(await getMessage(db.db, m.id)).toMatchObject({ status: 'PENDING', attempts: 1, handlers_done: [] });
      await makeDue(db.db, [m.id]);
      await w.runOnce();
      const row = await getMessage(db.db, m.id);
      expect(row).toMatchObject({ status: 'DEAD', attempts: 2, handlers_done: ['email.host'] });
      expect(row.last_error).toMatch(/^email\.guest: .*550/);
      expect(hostCalls).toBe(2);
      expect(guestCalls).toBe(2);
    } finally {
      await w.stop();
    }
  });
});
