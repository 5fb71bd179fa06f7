import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/config.ts';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import { buildApp } from '../../../src/http/app.ts';
import { daysFromNow, listProperty, signUp, testConfig, type Session } from '../../helpers/app.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * Clients that stall, over real sockets against real PostgreSQL: sockets that send the headers of
 * POST /auth/login and never the body once made admission control refuse every request of
 * everyone (they were counted in flight from their headers, and nothing timed them out). Now they
 * are closed with 408 once HTTP_REQUEST_TIMEOUT_MS passes, hold no slot meanwhile, and one address
 * may have only HTTP_MAX_UPLOADS_PER_ADDRESS of them.
 *
 * The stalling sockets come from 127.0.0.2 and the honest client from 127.0.0.1 (both loopback on
 * Linux), so the per-address cap tells them apart as it would two machines.
 *
 * The suite runs with short timeouts. SLOW_CLIENTS_FULL=1 runs the scenario at the production
 * defaults with the sockets held (reopened as they are closed) for 60 s, and prints the bookings'
 * latencies (ADR 0041 quotes them); SLOW_CLIENTS_PRINT=1 prints the short run's.
 *
 * Slow (about 13 s alone): the timeouts are the behaviour: stalled sockets are held until the
 * server's timeouts close them.
 */

const FULL = process.env.SLOW_CLIENTS_FULL === '1';
const ATTACKER = '127.0.0.2';
const HONEST = '127.0.0.1';

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('slow');
});
afterAll(async () => {
  await tdb.drop();
});

interface Served {
  app: FastifyInstance;
  db: Database;
  port: number;
  base: string;
  guest: Session;
  propertyId: string;
  /** Requests whose headers the server has parsed so far, by path. */
  seen(path: string): number;
  close(): Promise<void>;
}

/** An API listening on a port, load shedding on at its defaults and a pool of 10, with a guest and a property. */
async function serve(env: Record<string, string>): Promise<Served> {
  const db = createDatabase(tdb.url, { max: 10, applicationName: 'stayhub-test' });
  const config = testConfig(tdb, { LOG_LEVEL: 'silent', LOAD_SHEDDING: 'true', ...env });
  const app = await buildApp({ config, logger: pino({ level: 'silent' }), db });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const host = await signUp(app, 'host');
  const guest = await signUp(app, 'guest');
  const propertyId = (await listProperty(app, host)).id;
  const port = (app.server.address() as AddressInfo).port;
  const seen = new Map<string, number>();
  // Node emits 'request' once it has a request's headers (Fastify's own listener is the first).
  app.server.on('request', (req: { url?: string }) => seen.set(req.url ?? '', (seen.get(req.url ?? '') ?? 0) + 1));
  return {
    seen: (path) => seen.get(path) ?? 0,
    app,
    db,
    port,
    base: `http://127.0.0.1:${port}`,
    guest,
    propertyId,
    async close() {
      await app.close();
      await db.close();
    },
  };
}

/** What became of one stalled socket. */
interface Stalled {
  openedAt: number;
  /** The first line of whatever the server wrote ('' if nothing). */
  statusLine: Promise<string>;
  /** performance.now() when the socket closed. */
  closedAt: Promise<number>;
  socket: net.Socket;
}

const LOGIN_HEADERS = (port: number) =>
  `POST /auth/login HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 80\r\n\r\n`;

/** A socket from `from` that sends `head` (by default the headers of a login, no body) and then nothing. */
function stall(port: number, from = ATTACKER, head = LOGIN_HEADERS(port)): Stalled {
  const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
  socket.on('error', () => {});
  socket.on('connect', () => socket.write(head));
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  const closedAt = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now())));
  return { openedAt: performance.now(), socket, closedAt, statusLine: closedAt.then(() => received.split('\r\n', 1)[0] ?? '') };
}

const statusOf = (line: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(line)?.[1] ?? 0);

let stayDay = 10;
/** One booking of a stay nobody else asked for, from the honest address: status and latency. */
async function book(s: Served): Promise<{ status: number; ms: number }> {
  stayDay += 2;
  const started = performance.now();
  const res = await fetch(`${s.base}/bookings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${s.guest.token}` },
    body: JSON.stringify({ propertyId: s.propertyId, checkIn: daysFromNow(stayDay), checkOut: daysFromNow(stayDay + 1), guests: 1 }),
  });
  await res.arrayBuffer();
  return { status: res.status, ms: performance.now() - started };
}

async function series(s: Served, name: string): Promise<number> {
  const text = await (await fetch(`${s.base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? Number.NaN : Number(line.slice(name.length + 1));
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;

describe('sockets that stall their body', () => {
  it(
    `50 of them held ${FULL ? '60 s at the production defaults' : 'through several timeouts'}: every booking beside them is a 201 within 1 s, and each is closed with 408 once its timeout passes`,
    { timeout: FULL ? 120_000 : 30_000 },
    async () => {
      const requestTimeoutMs = FULL ? loadConfig({}).HTTP_REQUEST_TIMEOUT_MS : 1500;
      const holdMs = FULL ? 60_000 : 4000;
      const s = await serve(FULL ? {} : { HTTP_REQUEST_TIMEOUT_MS: String(requestTimeoutMs), HTTP_HEADERS_TIMEOUT_MS: '1000' });
      const checkEveryMs = FULL ? 1000 : 250;
      const sockets: Stalled[] = [];
      let holding = true;
      // Each of 50 places holds a stalled socket for the whole run: one closed is opened again.
      const hold = async () => {
        while (holding) {
          const st = stall(s.port);
          sockets.push(st);
          await within(st.closedAt, requestTimeoutMs + 5000, 'a stalled socket closed');
        }
      };
      try {
        const holders = Array.from({ length: 50 }, () => hold());
        // The server has every one's headers before the first booking.
        await until(async () => s.seen('/auth/login') >= 50, 'the 50 stalled logins seen');

        const bookings: { status: number; ms: number }[] = [];
        const started = performance.now();
        while (performance.now() - started < holdMs) bookings.push(await book(s));
        holding = false;
        const lastOpened = sockets.length;
        await Promise.all(holders);

        const latencies = bookings.map((b) => b.ms).sort((a, b) => a - b);
        const figures = {
          bookings: bookings.length,
          p50: Math.round(quantile(latencies, 0.5)),
          p99: Math.round(quantile(latencies, 0.99)),
          max: Math.round(latencies.at(-1)!),
          stalledSockets: lastOpened,
          /** How long the stalled sockets lived (ms): the shortest and the longest. */
          lived: [Number.POSITIVE_INFINITY, 0],
        };
        for (const st of sockets) {
          const lived = Math.round((await st.closedAt) - st.openedAt);
          figures.lived = [Math.min(figures.lived[0]!, lived), Math.max(figures.lived[1]!, lived)];
        }
        if (FULL || process.env.SLOW_CLIENTS_PRINT === '1') console.log(`slow clients: ${JSON.stringify(figures)}`);
        expect(
          bookings.filter((b) => b.status !== 201),
          JSON.stringify(figures),
        ).toEqual([]);
        expect(figures.max, JSON.stringify(figures)).toBeLessThan(1000);
        // The stalled sockets were cut off by the timeout, not before it and not long after: 408,
        // then closed, between the timeout and the next check of it (with room for a slow machine).
        expect(sockets.length).toBeGreaterThan(50);
        for (const st of sockets) {
          const [line, closedAt] = await Promise.all([st.statusLine, st.closedAt]);
          expect(statusOf(line), line).toBe(408);
          const lived = closedAt - st.openedAt;
          expect(lived).toBeGreaterThanOrEqual(requestTimeoutMs - 50);
          expect(lived).toBeLessThan(requestTimeoutMs + checkEveryMs + 2000);
        }
        expect(await series(s, 'stayhub_http_slow_clients_total{reason="timeout"}')).toBe(sockets.length);
        // None of them was ever in flight: no refusal at all.
        for (const cls of ['reads', 'writes']) {
          expect(await series(s, `stayhub_http_shed_requests_total{class="${cls}",signal="pool"}`)).toBe(0);
        }
      } finally {
        holding = false;
        for (const st of sockets) st.socket.destroy();
        await s.close();
      }
    },
  );

  it('one address may have HTTP_MAX_UPLOADS_PER_ADDRESS of them; past it 429 and closed at once; other addresses are not affected', async () => {
    const s = await serve({ HTTP_MAX_UPLOADS_PER_ADDRESS: '5', HTTP_REQUEST_TIMEOUT_MS: '3000', HTTP_HEADERS_TIMEOUT_MS: '1000' });
    const sockets: Stalled[] = [];
    try {
      for (let i = 0; i < 5; i++) sockets.push(stall(s.port));
      await until(async () => s.seen('/auth/login') >= 5, 'the five stalled logins seen');
      const over = Array.from({ length: 3 }, () => stall(s.port));
      for (const st of over) {
        expect(statusOf(await st.statusLine)).toBe(429);
        // Refused at once, long before the timeout.
        expect((await st.closedAt) - st.openedAt).toBeLessThan(2000);
      }
      // A whole request from the same address is refused too while its five uploads are open…
      const same = stall(s.port, ATTACKER, `GET /health HTTP/1.1\r\nHost: x\r\n\r\n`);
      expect(statusOf(await same.statusLine)).toBe(429);
      // …and another address books as usual.
      expect((await book(s)).status).toBe(201);
      for (const st of sockets) expect(statusOf(await within(st.statusLine, 8000, 'closed'))).toBe(408);
      // Once they are gone the address is served again.
      const again = stall(s.port, ATTACKER, `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      expect(statusOf(await again.statusLine)).toBe(200);
      expect(await series(s, 'stayhub_http_slow_clients_total{reason="uploads"}')).toBe(4);
    } finally {
      for (const st of sockets) st.socket.destroy();
      await s.close();
    }
  });

  it('headers that do not arrive within HTTP_HEADERS_TIMEOUT_MS: 408 and closed, before the request timeout', async () => {
    const s = await serve({ HTTP_REQUEST_TIMEOUT_MS: '5000', HTTP_HEADERS_TIMEOUT_MS: '1000' });
    try {
      const st = stall(s.port, ATTACKER, `POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: appl`);
      expect(statusOf(await within(st.statusLine, 8000, 'closed'))).toBe(408);
      const lived = (await st.closedAt) - st.openedAt;
      expect(lived).toBeGreaterThanOrEqual(950);
      expect(lived).toBeLessThan(4000);
    } finally {
      await s.close();
    }
  });

  it('an idle keep-alive connection is closed after HTTP_KEEP_ALIVE_TIMEOUT_MS', async () => {
    const s = await serve({ HTTP_KEEP_ALIVE_TIMEOUT_MS: '1000' });
    try {
      const st = stall(s.port, HONEST, `GET /health HTTP/1.1\r\nHost: x\r\n\r\n`);
      expect(statusOf(await within(st.statusLine, 8000, 'closed'))).toBe(200);
      const lived = (await st.closedAt) - st.openedAt;
      expect(lived).toBeGreaterThanOrEqual(950);
      expect(lived).toBeLessThan(5000);
    } finally {
      await s.close();
    }
  });
});

describe('the settings', () => {
  it('have production defaults, ranges, and headers within the request timeout', () => {
    const c = loadConfig({});
    expect([c.HTTP_REQUEST_TIMEOUT_MS, c.HTTP_HEADERS_TIMEOUT_MS, c.HTTP_KEEP_ALIVE_TIMEOUT_MS, c.HTTP_MAX_UPLOADS_PER_ADDRESS]).toEqual([
      10_000, 5_000, 72_000, 64,
    ]);
    expect(() => loadConfig({ HTTP_REQUEST_TIMEOUT_MS: '2000', HTTP_HEADERS_TIMEOUT_MS: '3000' })).toThrow(/HTTP_HEADERS_TIMEOUT_MS/);
    expect(() => loadConfig({ HTTP_REQUEST_TIMEOUT_MS: '0' })).toThrow(ConfigError);
    expect(() => loadConfig({ HTTP_REQUEST_TIMEOUT_MS: '300001' })).toThrow(ConfigError);
    expect(() => loadConfig({ HEALTH_DB_TIMEOUT_MS: '10' })).toThrow(ConfigError);
  });
});

/** `p`, or a failure naming `what` after `ms`: a socket never closed fails the test rather than hanging it. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

async function until(check: () => Promise<boolean>, what: string) {
  for (let i = 0; !(await check()); i++) {
    if (i > 500) throw new Error(`never: ${what}`);
    await sleep(10);
  }
}
