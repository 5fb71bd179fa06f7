import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { sql } from 'drizzle-orm';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookSender, type WebhookSender } from '../../../src/webhooks/delivery/sender.ts';
import { recordBookingEvent } from '../../../src/webhooks/fan-out.ts';
import { listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The webhook sender with kept-alive connections (its default), against one real local receiver
 * that counts its connections: deliveries reuse them, and an endpoint that never answers holds
 * its own slots and connections only, even on the same origin as a healthy one (one pool per
 * origin and address must not become one queue: with a socket cap per agent the healthy endpoint's
 * requests wait behind the hanging ones).
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
let host: Session;
let propertyId: string;
const senders: WebhookSender[] = [];
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  host = await signUp(t.app, 'host');
  propertyId = (await listProperty(t.app, host)).id;
});

afterEach(async () => {
  await Promise.all(senders.splice(0).map((s) => s.stop(0)));
  await Promise.all(closers.splice(0).map((c) => c()));
  await t.db.db.execute(sql`update webhook_endpoints set enabled = false`);
});

/** One receiver: /ok answers 204, /hang never answers; counts requests per path and connections. */
async function receiver() {
  const got = { ok: 0, hang: 0, connections: 0 };
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/hang') {
        got.hang++;
        hanging.add(res);
      } else {
        got.ok++;
        res.writeHead(204).end();
      }
    });
  });
  server.on('connection', (_s: Socket) => void got.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  closers.push(async () => {
    for (const res of hanging) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { got, base };
}

async function register(url: string) {
  const res = await t.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: host.auth, payload: { url } });
  expect(res.statusCode, res.body).toBe(201);
}

async function bookingEvents(n: number) {
  for (let i = 0; i < n; i++) {
    await recordBookingEvent(t.db.db, {
      type: 'booking.created',
      eventId: randomUUID(),
      occurredAt: new Date(),
      payload: bookingPayload({ propertyId }),
    });
  }
}

function sender(env: Record<string, string> = {}) {
  const config = workerConfig(t.db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', ...env });
  const s = createWebhookSender({ db: t.db.db, pool: t.db.pool, config, logger: captureLogger().logger });
  senders.push(s);
  return s;
}

describe('the webhook sender on kept-alive connections', () => {
  it('delivers over no more connections than an endpoint has slots', async () => {
    const r = await receiver();
    await register(`${r.base}/ok`);
    await bookingEvents(40);
    await sender({ WEBHOOK_ENDPOINT_CONCURRENCY: '4' }).runUntilIdle();
    expect(r.got.ok).toBe(40);
    expect(r.got.connections).toBeGreaterThan(0);
    expect(r.got.connections).toBeLessThanOrEqual(4);
  });

  it('opens a connection per attempt with WEBHOOK_KEEP_ALIVE=false', async () => {
    const r = await receiver();
    await register(`${r.base}/ok`);
    await bookingEvents(10);
    await sender({ WEBHOOK_KEEP_ALIVE: 'false' }).runUntilIdle();
    expect(r.got.ok).toBe(10);
    expect(r.got.connections).toBe(10);
  });

  it('keeps delivering to a healthy endpoint beside one that never answers, on the same origin', async () => {
    const r = await receiver();
    await register(`${r.base}/hang`);
    await register(`${r.base}/ok`);
    // Each event goes to both endpoints; the hanging one keeps its 4 slots (and connections) busy
    // for the whole attempt timeout, far longer than the test waits.
    await bookingEvents(20);
    const s = sender({ WEBHOOK_ENDPOINT_CONCURRENCY: '4', WEBHOOK_HOST_CONCURRENCY: '8', WEBHOOK_TIMEOUT_MS: '60000' });
    s.start();
    await waitFor(async () => r.got.ok === 20, 15_000, 'every delivery to the healthy endpoint');
    expect(r.got.hang).toBe(4); // still hanging: the healthy deliveries did not wait for them
  });
});
