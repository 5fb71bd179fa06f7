import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/config.ts';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import { buildApp } from '../../../src/http/app.ts';
import { createLoadSignals } from '../../../src/http/load-signals.ts';
import { createPostgresSearchIndex, type PostgresSearchIndex } from '../../../src/search/postgres-search-index.ts';
import type { SearchIndex } from '../../../src/search/search-index.ts';
import { daysFromNow, listProperty, signUp, testConfig, type Session } from '../../helpers/app.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * Refusing early, over real HTTP against real PostgreSQL: each signal (the expected wait for a
 * database connection, the event-loop delay, the outbox backlog) refuses reads (GET) at its lower
 * threshold while bookings still go through, and bookings at the higher one; every refusal is a 503
 * `overloaded` with Retry-After. A wait for a connection that times out while the database is up is
 * `overloaded` too, never "database unavailable"; and every 503 of the API says when to come back.
 *
 * The pools are made small here (two connections) and held by the test, so that "the pool is
 * busy" is a state the test sets up, not a race it hopes to win.
 *
 * Slow (about 17 s alone): each signal is built up for real against a running API: held pools, a
 * blocked event loop, a written backlog.
 */

/** Load shedding on (the test helpers turn it off), every signal off: each test turns on the one it is about. */
const ALL_OFF = {
  LOAD_SHEDDING: 'true',
  LOAD_SHED_READS_EVENT_LOOP_DELAY_MS: '0',
  LOAD_SHED_WRITES_EVENT_LOOP_DELAY_MS: '0',
  LOAD_SHED_READS_POOL_WAIT_MS: '0',
  LOAD_SHED_WRITES_POOL_WAIT_MS: '0',
  LOAD_SHED_READS_OUTBOX_PENDING: '0',
  LOAD_SHED_WRITES_OUTBOX_PENDING: '0',
};

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('shed');
});
afterAll(async () => {
  await tdb.drop();
});

interface Served {
  app: FastifyInstance;
  db: Database;
  base: string;
  host: Session;
  guest: Session;
  propertyId: string;
  close(): Promise<void>;
}

/** An API listening on a port, on a pool of its own (`max` connections), with a host, a guest and a property. */
async function serve(
  env: Record<string, string>,
  pool: { max: number; connectionTimeoutMs: number },
  searchIndex?: SearchIndex,
): Promise<Served> {
  const db = createDatabase(tdb.url, { max: pool.max, connectionTimeoutMs: pool.connectionTimeoutMs, applicationName: 'stayhub-test' });
  const config = testConfig(tdb, { LOG_LEVEL: 'silent', ...env });
  const app = await buildApp({ config, logger: pino({ level: 'silent' }), db, ...(searchIndex ? { searchIndex } : {}) });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const host = await signUp(app, 'host');
  const guest = await signUp(app, 'guest');
  const propertyId = (await listProperty(app, host)).id;
  return {
    app,
    db,
    base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    host,
    guest,
    propertyId,
    async close() {
      await app.close();
      await db.close();
    },
  };
}

interface Answer {
  status: number;
  retryAfter: string | null;
  body: { code?: string; detail?: string; title?: string };
}

async function call(s: Served, method: 'GET' | 'POST', url: string, body?: unknown, token?: string): Promise<Answer> {
  const res = await fetch(s.base + url, {
    method,
    headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json().catch(() => ({}))) as Answer['body'] };
}

const search = (s: Served) => call(s, 'GET', '/search?city=Porto');
let stayDay = 10;
/** A booking of a stay no other request asked for. */
const book = (s: Served) => {
  stayDay += 3;
  return call(
    s,
    'POST',
    '/bookings',
    { propertyId: s.propertyId, checkIn: daysFromNow(stayDay), checkOut: daysFromNow(stayDay + 2), guests: 1 },
    s.guest.token,
  );
};

/** A refusal: 503, Retry-After, the `overloaded` problem. */
function expectOverloaded(a: Answer) {
  expect(a.status, JSON.stringify(a.body)).toBe(503);
  expect(a.body.code).toBe('overloaded');
  expect(Number(a.retryAfter)).toBeGreaterThan(0);
}

async function shedCount(s: Served, cls: 'reads' | 'writes', signal: string): Promise<number> {
  const text = await (await fetch(`${s.base}/metrics`)).text();
  const series = `stayhub_http_shed_requests_total{class="${cls}",signal="${signal}"}`;
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
}

/** Until `pool` has `n` requests waiting (the test's own connects, or the API's). */
async function untilWaiting(pool: pg.Pool, n: number) {
  for (let i = 0; pool.waitingCount < n; i++) {
    if (i > 500) throw new Error(`the pool never had ${n} waiting (has ${pool.waitingCount})`);
    await sleep(10);
  }
}

describe('every 503 says when to come back and what it is', () => {
  it('a wait for a connection that times out while the pool serves others is overloaded, not "database unavailable"', async () => {
    const s = await serve({ LOAD_SHEDDING: 'false' }, { max: 2, connectionTimeoutMs: 1000 });
    const held: pg.PoolClient[] = [];
    try {
      held.push(await s.db.pool.connect(), await s.db.pool.connect());
      // Another request is ahead in the queue; when a held connection comes back it gets it: the
      // pool is serving, the database answering, and the API's request still waits its whole turn.
      const ahead = s.db.pool.connect();
      const answer = call(s, 'GET', `/properties/${s.propertyId}`);
      await untilWaiting(s.db.pool, 2);
      held.shift()!.release();
      held.push(await ahead);
      const a = await answer;
      expectOverloaded(a);
      expect(JSON.stringify(a.body)).not.toMatch(/database is unavailable/i);
      for (const c of held.splice(0)) c.release();

      // The twin: no connection comes back for two waits (a hung server looks like this), and that
      // one is still an outage. Both say when to retry.
      await sleep(1100);
      held.push(await s.db.pool.connect(), await s.db.pool.connect());
      const b = await call(s, 'GET', `/properties/${s.propertyId}`);
      expect(b.status).toBe(503);
      expect(b.body.code).toBe('service_unavailable');
      expect(Number(b.retryAfter)).toBeGreaterThan(0);
    } finally {
      for (const c of held) c.release();
      await s.close();
    }
  });

  it('a search whose index stays busy is overloaded; an index that is down is unavailable; both with Retry-After', async () => {
    // One connection, and a wait for it of 600 ms (the index's timeout follows its statement timeout).
    const index: PostgresSearchIndex = createPostgresSearchIndex({ url: tdb.url, max: 1, statementTimeoutMs: 600 });
    const s = await serve({ LOAD_SHEDDING: 'false' }, { max: 4, connectionTimeoutMs: 5000 }, index);
    const held: pg.PoolClient[] = [];
    try {
      held.push(await index.pool.connect());
      const ahead = index.pool.connect();
      const answer = search(s);
      await untilWaiting(index.pool, 2);
      held.shift()!.release();
      held.push(await ahead);
      expectOverloaded(await answer);
    } finally {
      for (const c of held) c.release();
      await s.close();
      await index.close();
    }

    const down = createPostgresSearchIndex({ url: 'postgres://postgres:x@127.0.0.1:1/nothing', statementTimeoutMs: 500 });
    const d = await serve({ LOAD_SHEDDING: 'false' }, { max: 4, connectionTimeoutMs: 5000 }, down);
    try {
      const a = await search(d);
      expect(a.status).toBe(503);
      expect(a.body.code).toBe('service_unavailable');
      // The search 503s that once carried no Retry-After were these.
      expect(Number(a.retryAfter)).toBeGreaterThan(0);
    } finally {
      await d.close();
      await down.close();
    }
  });
});

describe('reads are refused before bookings, on each signal', () => {
  it('the expected wait for a database connection', async () => {
    // The expected wait is the queue for a connection over the rate requests were answered lately
    // (a few a second here: the set-up's). The test holds both connections and queues requests of
    // its own: 8 make a wait of more than 100 ms at any rate up to 80 a second, under 10 s at any
    // rate of at least one; 400 make more than 10 s at any rate up to 40.
    const s = await serve(
      { ...ALL_OFF, LOAD_SHED_READS_POOL_WAIT_MS: '100', LOAD_SHED_WRITES_POOL_WAIT_MS: '10000' },
      { max: 2, connectionTimeoutMs: 30_000 },
    );
    const held: pg.PoolClient[] = [];
    const waiters: Promise<pg.PoolClient>[] = [];
    const queue = (n: number) => {
      while (waiters.length < n) waiters.push(s.db.pool.connect());
    };
    const releaseAll = async () => {
      for (const c of held.splice(0)) c.release();
      for (const w of waiters.splice(0)) (await w).release();
    };
    try {
      held.push(await s.db.pool.connect(), await s.db.pool.connect());
      queue(8);
      expectOverloaded(await search(s));
      expectOverloaded(await call(s, 'GET', `/properties/${s.propertyId}`));
      // The booking is let in: it queues for a connection and books once they come back.
      const booking = book(s);
      await untilWaiting(s.db.pool, 9);
      await releaseAll();
      expect((await booking).status).toBe(201);
      expect(await shedCount(s, 'reads', 'pool')).toBe(2);
      expect(await shedCount(s, 'writes', 'pool')).toBe(0);

      // A longer queue: past the bookings' threshold, they are refused too.
      held.push(await s.db.pool.connect(), await s.db.pool.connect());
      queue(400);
      expectOverloaded(await book(s));
      expectOverloaded(await search(s));
      await releaseAll();
      expect(await shedCount(s, 'writes', 'pool')).toBe(1);
    } finally {
      await releaseAll();
      await s.close();
    }
  });

  it('the event-loop delay', async () => {
    const s = await serve(
      { ...ALL_OFF, LOAD_SHED_READS_EVENT_LOOP_DELAY_MS: '20', LOAD_SHED_WRITES_EVENT_LOOP_DELAY_MS: '150' },
      { max: 4, connectionTimeoutMs: 5000 },
    );
    // Keeps the process's event loop busy in `chunkMs` slices (a loop whose every turn runs long,
    // as under a thousand clients) until stopped; the requests under test run between slices.
    const busy = (chunkMs: number) => {
      let on = true;
      const slice = () => {
        const until = performance.now() + chunkMs;
        while (performance.now() < until);
        if (on) setImmediate(slice);
      };
      setImmediate(slice);
      return () => {
        on = false;
      };
    };
    try {
      expect((await search(s)).status).toBe(200);

      let stop = busy(60); // a mean delay of about 50 ms: past the reads' 20, under the bookings' 150
      await sleep(600);
      const [read, booking] = await Promise.all([search(s), book(s)]);
      stop();
      expectOverloaded(read);
      expect(booking.status).toBe(201);

      stop = busy(400); // about 400 ms: past both
      await sleep(1000);
      const refused = await book(s);
      stop();
      expectOverloaded(refused);
      expect(await shedCount(s, 'reads', 'event_loop')).toBeGreaterThanOrEqual(1);
      expect(await shedCount(s, 'writes', 'event_loop')).toBe(1);
    } finally {
      await s.close();
    }
  });

  it('the outbox backlog, sampled, and /health and /metrics are never refused', async () => {
    const s = await serve(
      { ...ALL_OFF, LOAD_SHED_READS_OUTBOX_PENDING: '10', LOAD_SHED_WRITES_OUTBOX_PENDING: '40', LOAD_SHED_OUTBOX_CHECK_MS: '100' },
      { max: 4, connectionTimeoutMs: 5000 },
    );
    const backlog = (n: number) =>
      tdb.pool.query(`insert into outbox (topic, payload) select 'test.backlog', '{}'::jsonb from generate_series(1, $1)`, [n]);
    const until = async (what: () => Promise<Answer>) => {
      for (let i = 0; ; i++) {
        const a = await what();
        if (a.status === 503 || i > 50) return a;
        await sleep(100);
      }
    };
    try {
      // What earlier tests and the set-up left (bookings, a property) goes: the backlog is the test's.
      await tdb.pool.query(`delete from outbox`);
      await backlog(20); // past the reads' 10, under the bookings' 40
      expectOverloaded(await until(() => search(s)));
      expect((await book(s)).status).toBe(201);
      expect((await call(s, 'GET', '/health')).status).toBe(200);
      expect((await fetch(`${s.base}/metrics`)).status).toBe(200);

      await backlog(30);
      expectOverloaded(await until(() => book(s)));
      expect(await shedCount(s, 'reads', 'outbox')).toBeGreaterThanOrEqual(1);
      expect(await shedCount(s, 'writes', 'outbox')).toBe(1);
    } finally {
      await s.close();
    }
  });

  it('a read threshold above its write threshold is refused at start', () => {
    expect(() => loadConfig({ LOAD_SHED_READS_POOL_WAIT_MS: '600', LOAD_SHED_WRITES_POOL_WAIT_MS: '500' })).toThrow(ConfigError);
    expect(() => loadConfig({ LOAD_SHED_READS_POOL_WAIT_MS: '600', LOAD_SHED_WRITES_POOL_WAIT_MS: '500' })).toThrow(
      /LOAD_SHED_READS_POOL_WAIT_MS/,
    );
  });
});

/*
 * One test a rule, each seen failing with the rule broken by hand. The expected wait is set up
 * exactly: the test holds both of a two-connection pool's and queues n requests of its own; with
 * few requests answered lately the rate taken is the floor, two connections each held 100 ms (20 a
 * second), so every request queued adds 50 ms.
 */
describe('the rules of admission, one by one', () => {
  /** Holds both connections of `s`'s pool and queues `n` connects; `queue(m)` adds up to m, `release()` gives all back. */
  async function crowd(s: Served, n: number) {
    const held = [await s.db.pool.connect(), await s.db.pool.connect()];
    const waiters: Promise<pg.PoolClient>[] = [];
    const queue = (m: number) => {
      while (waiters.length < m) waiters.push(s.db.pool.connect());
    };
    queue(n);
    await untilWaiting(s.db.pool, n);
    return {
      queue,
      async release() {
        for (const c of held.splice(0)) c.release();
        for (const w of waiters.splice(0)) (await w).release();
      },
    };
  }
  const reads100 = {
    ...ALL_OFF,
    LOAD_SHED_READS_POOL_WAIT_MS: '100',
    LOAD_SHED_WRITES_POOL_WAIT_MS: '10000',
    LOAD_SHED_REFUSAL_DELAY_MS: '0',
  };

  it('a refusal says Retry-After: LOAD_SHED_RETRY_AFTER_SECONDS, 2 by default', async () => {
    expect(loadConfig({}).LOAD_SHED_RETRY_AFTER_SECONDS).toBe(2);
    for (const [env, expected] of [
      [{}, '2'],
      [{ LOAD_SHED_RETRY_AFTER_SECONDS: '7' }, '7'],
    ] as const) {
      const s = await serve({ ...reads100, ...env }, { max: 2, connectionTimeoutMs: 10_000 });
      const c = await crowd(s, 8);
      try {
        const a = await search(s);
        expectOverloaded(a);
        expect(a.retryAfter).toBe(expected);
      } finally {
        await c.release();
        await s.close();
      }
    }
  });

  it('HEAD is a read: refused at the reads threshold, as GET is, while bookings are let in', async () => {
    const s = await serve(reads100, { max: 2, connectionTimeoutMs: 10_000 });
    const c = await crowd(s, 8);
    try {
      const head = await fetch(`${s.base}/properties/${s.propertyId}`, { method: 'HEAD' });
      expect(head.status).toBe(503);
      expect(head.headers.get('retry-after')).toBe('2');
      expect(await shedCount(s, 'reads', 'pool')).toBe(1);
      const booking = book(s);
      await untilWaiting(s.db.pool, 9);
      await c.release();
      expect((await booking).status).toBe(201);
      expect(await shedCount(s, 'writes', 'pool')).toBe(0);
    } finally {
      await c.release();
      await s.close();
    }
  });

  it('a request exactly at its threshold is let in; the next, one queued request past it, is refused', async () => {
    const s = await serve(reads100, { max: 2, connectionTimeoutMs: 10_000 });
    const c = await crowd(s, 2); // 2 queued: 100 ms, the reads' threshold itself
    try {
      const atThreshold = call(s, 'GET', `/properties/${s.propertyId}`);
      await untilWaiting(s.db.pool, 3); // it was let in, and queues for a connection: 150 ms now
      expectOverloaded(await call(s, 'GET', `/properties/${s.propertyId}`));
      await c.release();
      expect((await atThreshold).status).toBe(200);
    } finally {
      await c.release();
      await s.close();
    }
  });

  it('by default bookings are refused past 250 ms of expected wait, not before', async () => {
    // The defaults, but for the event loop, which the test runner's own work would move.
    const s = await serve(
      { LOAD_SHEDDING: 'true', LOAD_SHED_READS_EVENT_LOOP_DELAY_MS: '0', LOAD_SHED_REFUSAL_DELAY_MS: '0' },
      { max: 2, connectionTimeoutMs: 10_000 },
    );
    const c = await crowd(s, 4); // 200 ms
    try {
      const first = book(s);
      await untilWaiting(s.db.pool, 5); // 250 ms: at the threshold, still let in
      const second = book(s);
      await untilWaiting(s.db.pool, 6); // 300 ms: past it
      expectOverloaded(await book(s));
      await c.release();
      expect((await first).status).toBe(201);
      expect((await second).status).toBe(201);
      expect(await shedCount(s, 'writes', 'pool')).toBe(1);
      expect(loadConfig({}).LOAD_SHED_WRITES_POOL_WAIT_MS).toBe(250);
    } finally {
      await c.release();
      await s.close();
    }
  });

  it('up to twice the pool in flight is no queue; each request beyond it is one', async () => {
    const db = createDatabase(tdb.url, { max: 2, applicationName: 'stayhub-test' });
    // Not started: nothing answered yet, so the rate is the floor (2 connections × 10 a second).
    const signals = createLoadSignals({ db: db.db, pool: db.pool, outboxCap: 0, outboxEveryMs: 1000 });
    try {
      const done: (() => void)[] = [];
      for (let i = 0; i < 4; i++) done.push(signals.admitted());
      expect(signals.poolWaitMs()).toBe(0);
      done.push(signals.admitted());
      expect(signals.poolWaitMs()).toBe(50);
      done.push(signals.admitted());
      expect(signals.poolWaitMs()).toBe(100);
      // Answered, a request is no longer in flight (and answering it twice changes nothing).
      done[0]!();
      done[0]!();
      expect(signals.poolWaitMs()).toBe(50);
    } finally {
      await db.close();
    }
  });

  it('a read threshold of 0 (never refuse reads) while writes have one is refused at start; both 0 is allowed', () => {
    for (const [read, write] of [
      ['LOAD_SHED_READS_POOL_WAIT_MS', 'LOAD_SHED_WRITES_POOL_WAIT_MS'],
      ['LOAD_SHED_READS_EVENT_LOOP_DELAY_MS', 'LOAD_SHED_WRITES_EVENT_LOOP_DELAY_MS'],
      ['LOAD_SHED_READS_OUTBOX_PENDING', 'LOAD_SHED_WRITES_OUTBOX_PENDING'],
    ] as const) {
      expect(() => loadConfig({ [read]: '0', [write]: '500' }), read).toThrow(new RegExp(`${read}: must be above 0`));
      expect(loadConfig({ [read]: '0', [write]: '0' })[read]).toBe(0);
    }
  });
});
