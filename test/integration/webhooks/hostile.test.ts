import { sql } from 'drizzle-orm';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, listProperty, signUp, useTestApp, type Session, type TestApp } from '../../helpers/app.ts';
import { webhookKit } from '../../helpers/webhooks.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * Receivers and URLs that mean harm, or just break things: answers a database cannot store,
 * addresses spelt to look public, ports that are not the web's, passwords in URLs, secrets rotated
 * twice, histories without end, and a name that resolves to loopback when the attempt is made.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
let strict: TestApp;
let host: Session;
let strictHost: Session;
let propertyId: string;
const kit = webhookKit(t, { WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.2,0.2' });
const { receiver, startSender } = kit;

beforeAll(async () => {
  strict = await buildTestApp(t.db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'false' });
  strictHost = await signUp(strict.app, 'host');
});

afterAll(async () => {
  await strict.app.close();
});

afterEach(async () => {
  await kit.closeAll();
  // A host of its own per test, and no other test's endpoint left to send to.
  await t.db.db.execute(sql`update webhook_endpoints set enabled = false`);
  host = await signUp(t.app, 'host');
  propertyId = (await listProperty(t.app, host)).id;
});

beforeAll(async () => {
  host = await signUp(t.app, 'host');
  propertyId = (await listProperty(t.app, host)).id;
});

const register = (url: string) => kit.register(host, { url });

/** An endpoint as one registered before today's rules would have it: written straight to the table. */
async function legacyEndpoint(url: string): Promise<string> {
  const created = await register('https://hooks.example.test/placeholder');
  await t.db.db.execute(sql`update webhook_endpoints set url = ${url} where public_id = ${created.id}::uuid`);
  return created.id;
}

const bookingEvent = () => kit.bookingEvent(propertyId);
const deliveries = (endpointId: string, status?: string) => kit.deliveries(host, endpointId, status);

const endpoint = async (id: string) => (await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${id}`, headers: host.auth })).json();

describe('hostile receivers', () => {
  it('records an answer with a NUL byte and invalid UTF-8, and fails the delivery on its schedule', async () => {
    const r = await receiver(() => ({ status: 500, body: Buffer.from([0x6f, 0x6b, 0x00, 0xff, 0xfe, 0x21]) }));
    const ep = await register(r.url);
    await bookingEvent();
    startSender();
    const [failed] = await waitFor(
      async () => {
        const f = await deliveries(ep.id, 'failed');
        return f.length === 1 && f;
      },
      10_000,
      'the delivery to fail after its three attempts',
    );
    expect(r.received).toHaveLength(3); // not one more: each attempt was recorded
    expect(failed!.attempts.map((a) => a.responseStatus)).toEqual([500, 500, 500]);
    expect(failed!.attempts[0]!.responseBody).toBe('ok\uFFFD\uFFFD\uFFFD!');
    expect((await endpoint(ep.id)).health).toMatchObject({ state: 'failing', failedDeliveries: 1, pendingDeliveries: 0 });
    const retry = await t.app.inject({ method: 'POST', url: `/webhooks/deliveries/${failed!.id}/retry`, headers: host.auth });
    expect(retry.statusCode).toBe(202); // not the endless 409 of an attempt that could never be recorded
  });

  it('records an answer with NUL bytes throughout, every one of them replaced', async () => {
    const r = await receiver(() => ({ status: 500, body: Buffer.from('\u0000a\u0000\u0000b\u0000', 'utf8') }));
    const ep = await register(r.url);
    await bookingEvent();
    startSender();
    const [failed] = await waitFor(
      async () => {
        const f = await deliveries(ep.id, 'failed');
        return f.length === 1 && f;
      },
      10_000,
      'the delivery to fail after its three attempts',
    );
    expect(r.received).toHaveLength(3);
    expect(failed!.attempts.map((a) => a.responseBody)).toEqual(Array(3).fill('\uFFFDa\uFFFD\uFFFDb\uFFFD'));
  });

  it('keeps WEBHOOK_ATTEMPTS_KEPT attempts per delivery, the newest', async () => {
    const r = await receiver((n) => ({ status: 503, body: `attempt ${n}` }));
    const ep = await register(r.url);
    await bookingEvent();
    startSender({ WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.1,0.1,0.1,0.1,0.1', WEBHOOK_ATTEMPTS_KEPT: '3' });
    const [failed] = await waitFor(
      async () => {
        const f = await deliveries(ep.id, 'failed');
        return f.length === 1 && f;
      },
      10_000,
      'six attempts',
    );
    expect(r.received).toHaveLength(6);
    expect(failed!.attempts.map((a) => a.responseBody)).toEqual(['attempt 4', 'attempt 5', 'attempt 6']);
  });
});

describe('addresses and URLs', () => {
  const refuse = async (url: string) => {
    const res = await strict.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: strictHost.auth, payload: { url } });
    expect(res.statusCode, url).toBe(400);
    expect(res.json().errors[0].path, url).toBe('body.url');
    return res.json().errors[0].message as string;
  };

  it('refuses IPv4 loopback and link-local spelt as IPv6, naming the setting that allows private networks', async () => {
    for (const url of [
      'http://[::127.0.0.1]/hook', // IPv4-compatible
      'http://[::a9fe:a9fe]/hook', // 169.254.169.254, IPv4-compatible in hex
      'http://[::ffff:0:127.0.0.1]/hook', // IPv4-translated
      'http://[::ffff:7f00:1]/hook', // IPv4-mapped in hex
      'http://[64:ff9b::10.0.0.1]/hook', // NAT64 to a private address
    ]) {
      expect(await refuse(url)).toMatch(/public internet addresses only.*WEBHOOK_ALLOW_PRIVATE_NETWORKS=true/);
    }
  });

  it('refuses IPv6 site-local (fec0::/10), deprecated but still routed by some networks, at both ends of its range', async () => {
    for (const url of ['http://[fec0::1]/hook', 'http://[fed0:1:2::3]/hook', 'http://[feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]/hook']) {
      expect(await refuse(url)).toMatch(/public internet addresses only/);
    }
    // Its neighbours are judged by their own rules: link-local below it, multicast above it.
    expect(await refuse('http://[febf::1]/hook')).toMatch(/public internet addresses only/);
    expect(await refuse('http://[ff02::1]/hook')).toMatch(/public internet addresses only/);
  });

  it('refuses ports other than 80, 443 and 1024 and up', async () => {
    for (const url of ['https://hooks.example.test:0/', 'https://hooks.example.test:22/', 'http://hooks.example.test:25/']) {
      expect(await refuse(url)).toMatch(/port \d+ is not allowed/);
    }
    for (const url of ['https://hooks.example.test/', 'http://hooks.example.test:80/', 'https://hooks.example.test:8443/']) {
      const res = await strict.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: strictHost.auth, payload: { url } });
      expect(res.statusCode, url).toBe(201);
    }
  });

  it('refuses a user name or password in a URL, and hides one an existing endpoint has', async () => {
    expect(await refuse('https://bob:hunter2@hooks.example.test/')).toMatch(/user name or password/);
    expect(await refuse('https://token@hooks.example.test/')).toMatch(/user name or password/);
    const patch = await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/endpoints/${(await register('https://hooks.example.test/a')).id}`,
      headers: host.auth,
      payload: { url: 'https://bob:hunter2@hooks.example.test/' },
    });
    expect(patch.statusCode).toBe(400);

    // An endpoint with a password from before: it answers 410, so it is disabled and its host emailed.
    const r = await receiver(() => ({ status: 410 }));
    const id = await legacyEndpoint(r.url.replace('http://', 'http://bob:hunter2@'));
    await bookingEvent();
    startSender();
    await waitFor(async () => (await endpoint(id)).enabled === false, 10_000, 'the endpoint to be disabled');
    expect(r.received[0]!.headers.authorization).toBe(`Basic ${Buffer.from('bob:hunter2').toString('base64')}`); // still sent with it
    const shown = [
      JSON.stringify(await endpoint(id)),
      (await t.app.inject({ method: 'GET', url: '/webhooks/endpoints', headers: host.auth })).body,
    ];
    const { rows } = await t.db.db.execute<{ payload: unknown }>(
      sql`select payload from outbox where topic = 'webhook.endpoint-disabled' and payload->>'endpointId' = ${id}`,
    );
    expect(rows).toHaveLength(1);
    shown.push(JSON.stringify(rows[0]!.payload));
    for (const text of shown) {
      expect(text).not.toContain('hunter2');
      expect(text).not.toContain('bob');
      expect(text).toContain('redacted@127.0.0.1');
    }
  });

  it('checks the address again at the attempt: a name that resolves to loopback is refused there', async () => {
    const r = await receiver();
    const id = await legacyEndpoint(r.url.replace('127.0.0.1', 'localhost'));
    await bookingEvent();
    startSender({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'false' });
    const [d] = await waitFor(
      async () => {
        const f = await deliveries(id, 'failed');
        return f.length === 1 && f;
      },
      10_000,
      'the refused attempts',
    );
    expect(r.received).toEqual([]);
    expect(d!.attempts).toHaveLength(3);
    expect(d!.attempts[0]).toMatchObject({
      responseStatus: null,
      error: expect.stringMatching(/localhost resolves to .*not a public internet address/),
    });
  });

  it('checks the port again at the attempt', async () => {
    const id = await legacyEndpoint('http://127.0.0.1:22/');
    await bookingEvent();
    startSender();
    const [d] = await waitFor(
      async () => {
        const f = await deliveries(id, 'failed');
        return f.length === 1 && f;
      },
      10_000,
      'the refused attempts',
    );
    expect(d!.attempts[0]).toMatchObject({ responseStatus: null, error: expect.stringMatching(/port 22 is not allowed/) });
  });
});

describe('secret rotation', () => {
  it('keeps every rotated-out secret signing for its own overlap', async () => {
    const r = await receiver();
    const ep = await register(r.url);
    const rotate = async () =>
      (await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/rotate-secret`, headers: host.auth })).json()
        .secret as string;
    const second = await rotate();
    const third = await rotate(); // inside the first one's overlap
    await bookingEvent();
    startSender();
    await waitFor(async () => r.received.length === 1, 10_000, 'the delivery');
    const m = r.received[0]!;
    expect(String(m.headers['webhook-signature']).split(' ')).toHaveLength(3);
    for (const secret of [ep.secret, second, third]) {
      expect(() => new Webhook(secret).verify(m.body, m.headers as Record<string, string>)).not.toThrow();
    }

    // The first overlap ends; the second's has not.
    await t.db.db.execute(sql`
      update webhook_endpoints set retired_secrets = jsonb_set(retired_secrets, '{0,expiresAt}', to_jsonb(now() - interval '1 second'))
       where public_id = ${ep.id}::uuid`);
    await bookingEvent();
    await waitFor(async () => r.received.length === 2, 10_000, 'the second delivery');
    const n = r.received[1]!;
    expect(() => new Webhook(ep.secret).verify(n.body, n.headers as Record<string, string>)).toThrow();
    for (const secret of [second, third]) {
      expect(() => new Webhook(secret).verify(n.body, n.headers as Record<string, string>)).not.toThrow();
    }
  });

  it('refuses a rotation while five rotated-out secrets still overlap', async () => {
    const ep = await register('https://hooks.example.test/rotating');
    const codes = [];
    for (let i = 0; i < 6; i++) {
      codes.push(
        (await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/rotate-secret`, headers: host.auth })).statusCode,
      );
    }
    expect(codes).toEqual([200, 200, 200, 200, 200, 409]);
  });
});
