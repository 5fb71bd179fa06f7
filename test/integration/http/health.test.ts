import net from 'node:net';
import type pg from 'pg';
import { LogCapture, testConfig } from '../../helpers/app.ts';
import { createLogger } from '../../../src/logger.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.ts';
import { createDatabase } from '../../../src/db/client.ts';
import { buildApp } from '../../../src/http/app.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

describe('GET /health without a database', () => {
  it('answers 503 with db "down" instead of failing', async () => {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    const logs = new LogCapture();
    const db = createDatabase('postgres://nobody:nothing@127.0.0.1:1/none', { max: 1 });
    const app = await buildApp({
      config: loadConfig({ DATABASE_URL: 'postgres://nobody:nothing@127.0.0.1:1/none' }),
      db,
      logger: createLogger('info', 'api', logs),
    });
    try {
      const res = await app.inject({ method: 'GET', url: '/health' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ status: 'error', db: 'down' });
      expect(logs.text).toContain('ECONNREFUSED');
    } finally {
      await app.close();
      await db.close();
    }
  });

  it('a database that takes the connection and never answers is down within HEALTH_DB_TIMEOUT_MS, and /metrics says so as fast', async () => {
    // A hung server: it accepts and never says a word (the pool's 5 s wait was all /health had).
    const sockets = new Set<net.Socket>();
    const hung = net.createServer((s) => sockets.add(s.on('error', () => {})));
    await new Promise<void>((resolve) => hung.listen(0, '127.0.0.1', resolve));
    const url = `postgres://nobody:nothing@127.0.0.1:${(hung.address() as net.AddressInfo).port}/none`;
    const db = createDatabase(url, { max: 1 });
    const app = await buildApp({
      config: loadConfig({ DATABASE_URL: url, HEALTH_DB_TIMEOUT_MS: '300', LOG_LEVEL: 'silent' }),
      db,
      logger: createLogger('silent', 'api', new LogCapture()),
    });
    try {
      let started = performance.now();
      const res = await app.inject({ method: 'GET', url: '/health' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ status: 'error', db: 'down' });
      expect(performance.now() - started).toBeLessThan(2000);
      started = performance.now();
      const metrics = await app.inject({ method: 'GET', url: '/metrics' });
      expect(metrics.statusCode).toBe(200);
      expect(metrics.body).toMatch(/^stayhub_outbox_stats_up 0$/m);
      expect(performance.now() - started).toBeLessThan(2000);
    } finally {
      await app.close();
      await db.close();
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => hung.close(resolve));
    }
  });
});

describe('GET /health and /metrics while every connection of the pool is taken', () => {
  let tdb: TestDatabase;
  beforeAll(async () => {
    tdb = await createTestDatabase('health');
  });
  afterAll(async () => {
    await tdb.drop();
  });

  it('answer at once on their own connections: the database is up, the load is what admission refuses', async () => {
    // The main pool: two connections, both held by the test, and a queue behind them. Before
    // /health and /metrics had a pool of their own they waited in this queue: under real overload
    // /health said `db: down` and /metrics took 17 s.
    const db = createDatabase(tdb.url, { max: 2, connectionTimeoutMs: 10_000, applicationName: 'stayhub-test' });
    const config = testConfig(tdb, {
      LOG_LEVEL: 'silent',
      LOAD_SHEDDING: 'true',
      LOAD_SHED_READS_EVENT_LOOP_DELAY_MS: '0',
      LOAD_SHED_READS_POOL_WAIT_MS: '100',
      LOAD_SHED_WRITES_POOL_WAIT_MS: '1000',
    });
    const app = await buildApp({ config, db, logger: createLogger('silent', 'api', new LogCapture()) });
    await app.ready();
    const held: pg.PoolClient[] = [];
    const waiters: Promise<pg.PoolClient>[] = [];
    const queue = async (n: number) => {
      while (waiters.length < n) waiters.push(db.pool.connect());
      for (let i = 0; db.pool.waitingCount < n; i++) {
        if (i > 500) throw new Error('the queue never formed');
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    const timed = async (url: string) => {
      const started = performance.now();
      const res = await app.inject({ method: 'GET', url });
      return { res, ms: performance.now() - started };
    };
    try {
      let h = await timed('/health');
      expect(h.res.json()).toMatchObject({ status: 'ok', db: 'up', load: { refusing: 'nothing', poolWaitMs: 0 } });

      held.push(await db.pool.connect(), await db.pool.connect());
      await queue(8); // 8 × 50 ms: past the reads' 100, under the writes' 1,000
      h = await timed('/health');
      expect(h.res.statusCode).toBe(200);
      expect(h.res.json()).toMatchObject({ status: 'ok', db: 'up', outbox: { dead: 0 }, load: { refusing: 'reads', poolWaitMs: 400 } });
      expect(h.ms).toBeLessThan(1000);

      await queue(40); // 2,000 ms: past both
      h = await timed('/health');
      expect(h.res.json()).toMatchObject({ db: 'up', load: { refusing: 'everything', poolWaitMs: 2000 } });
      expect(h.ms).toBeLessThan(1000);

      const m = await timed('/metrics');
      expect(m.res.statusCode).toBe(200);
      expect(m.res.body).toMatch(/^stayhub_outbox_stats_up 1$/m);
      expect(m.ms).toBeLessThan(1000);
    } finally {
      for (const c of held) c.release();
      for (const w of waiters) (await w).release();
      await app.close();
      await db.close();
    }
  });
});
