import { sql } from 'drizzle-orm';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { housekeepOnce } from '../../../src/outbox/index.ts';
import { appChores } from '../../../src/worker/chores.ts';
import { signUp, useTestApp, type Session } from '../../helpers/app.ts';
import type { Answer } from '../../helpers/webhook-receiver.ts';
import { waitFor } from '../../helpers/wait.ts';
import { webhookKit } from '../../helpers/webhooks.ts';

/*
 * The webhook portal's API: what it reads beside the endpoints (one delivery with its request,
 * each endpoint's activity, filtered deliveries, test events of any type), portal links (read-only
 * and full, revoked, expired, audited, never able to make another link), and hosts kept apart on
 * every route the portal uses, by session and by link.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_MANUAL_SENDS_PER_MINUTE: '1000' });
const kit = webhookKit(t, { WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.2' });

let host: Session;
let otherHost: Session;
let guest: Session;

beforeAll(async () => {
  host = await signUp(t.app, 'host', 'Hanna Host');
  otherHost = await signUp(t.app, 'host', 'Otto Other');
  guest = await signUp(t.app, 'guest', 'Gus Guest');
});

afterEach(() => kit.closeAll());

const inject = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, auth: Record<string, string>, payload?: unknown) =>
  t.app.inject({ method, url, headers: auth, ...(payload === undefined ? {} : { payload: payload as object }) });

async function makeLink(session: Session, access: 'read' | 'full', extra: Record<string, unknown> = {}) {
  const res = await inject('POST', '/webhooks/portal-links', session.auth, { access, ...extra });
  expect(res.statusCode, res.body).toBe(201);
  const link = res.json() as { id: string; url: string; access: string; expiresAt: string; state: string };
  const token = /#link=(whpl_[A-Za-z0-9_-]+)$/.exec(link.url)![1]!;
  return { ...link, token, auth: { authorization: `Bearer ${token}` } };
}

/** Sends a test event and waits until its first attempt is recorded. */
async function deliveredTest(session: Session, endpointId: string, eventType?: string) {
  const sent = await inject('POST', `/webhooks/endpoints/${endpointId}/test`, session.auth, eventType ? { eventType } : undefined);
  expect(sent.statusCode, sent.body).toBe(202);
  const id = sent.json().id as string;
  return waitFor(
    async () => {
      const d = (await inject('GET', `/webhooks/deliveries/${id}`, session.auth)).json();
      return d.attempts.length > 0 ? d : undefined;
    },
    15_000,
    'the first attempt',
  );
}

describe('what the portal reads', () => {
  it('shows one delivery with the exact body it sent, its headers and every attempt with the answer', async () => {
    const receiver = await kit.receiver(() => ({ status: 500, body: '<b>down</b>' }));
    kit.startSender();
    const ep = await kit.register(host, { url: receiver.url });
    const d = await deliveredTest(host, ep.id, 'booking.cancelled');
    expect(d.request.body).toBe(receiver.received[0]!.body);
    expect(JSON.parse(d.request.body)).toMatchObject({ type: 'booking.cancelled', test: true, version: 2 });
    expect(d.request.headers).toEqual({
      'content-type': 'application/json',
      'user-agent': String(receiver.received[0]!.headers['user-agent']),
      'webhook-id': receiver.received[0]!.headers['webhook-id'],
    });
    expect(d.attempts[0]).toMatchObject({ responseStatus: 500, responseBody: '<b>down</b>' });
  });

  it('shows each attempt with the signed headers the receiver got and the headers it answered, bounded and inert', async () => {
    // Raw bytes on the wire (Node writes a header value as latin1): invalid UTF-8, markup, a direction override.
    const hostile = `<img src=x onerror=alert(1)>\xff\xfe${Buffer.from('\u202Eevil', 'utf8').toString('latin1')}`;
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x-many-${i}`, String(i)]));
    const receiver = await kit.receiver((n): Answer =>
      n === 1
        ? { status: 503, headers: { 'X-Request-Id': 'req-1', 'x-hostile': hostile, 'x-long': 'A'.repeat(1500) }, body: 'busy' }
        : { status: 200, headers: { 'x-request-id': 'req-2', ...many }, body: 'ok' },
    );
    kit.startSender();
    const ep = await kit.register(host, { url: receiver.url });
    const sent = await inject('POST', `/webhooks/endpoints/${ep.id}/test`, host.auth);
    const d = await waitFor(
      async () => {
        const got = (await inject('GET', `/webhooks/deliveries/${sent.json().id}`, host.auth)).json();
        return got.status === 'succeeded' ? got : undefined;
      },
      15_000,
      'a failure, then a success',
    );
    expect(d.attempts).toHaveLength(2);
    // The failure (recorded alone) and the success (recorded in a batch): each what its request carried.
    for (const [i, a] of d.attempts.entries()) {
      const got = receiver.received[i]!.headers;
      expect(Object.keys(a.requestHeaders)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
      expect(a.requestHeaders).toEqual({
        'webhook-id': got['webhook-id'],
        'webhook-timestamp': got['webhook-timestamp'],
        'webhook-signature': got['webhook-signature'],
      });
    }
    const [failure, success] = d.attempts;
    expect(failure.responseHeaders.slice(0, 3)).toEqual([
      { name: 'x-request-id', value: 'req-1' },
      { name: 'x-hostile', value: '<img src=x onerror=alert(1)>\uFFFD\uFFFD\u202Eevil' },
      { name: 'x-long', value: 'A'.repeat(1024), omittedBytes: 476 },
    ]);
    expect(failure.responseHeadersOmitted).toBe(0);
    expect(success.responseHeaders).toHaveLength(32);
    expect(success.responseHeaders.slice(0, 2)).toEqual([
      { name: 'x-request-id', value: 'req-2' },
      { name: 'x-many-0', value: '0' },
    ]);
    expect(success.responseHeadersOmitted).toBeGreaterThanOrEqual(41 - 32);

    // The list of deliveries stays as it was: headers only in one delivery's detail.
    const listed = await kit.deliveries(host, ep.id);
    expect(Object.keys(listed[0]!.attempts[0]!)).not.toContain('responseHeaders');
    // An attempt recorded without them (before they were kept, or by a worker of the release before).
    await t.db.db.execute(sql`update webhook_attempts set headers = null
                               where delivery_id = (select id from webhook_deliveries where public_id = ${d.id}::uuid)`);
    const old = (await inject('GET', `/webhooks/deliveries/${d.id}`, host.auth)).json();
    expect(old.attempts[0]).toMatchObject({ requestHeaders: null, responseHeaders: null, responseHeadersOmitted: 0 });
  });

  it("counts each endpoint's attempts and successes over the last hour and day, and names its last failure", async () => {
    let n = 0;
    const receiver = await kit.receiver(() => (++n === 1 ? { status: 204 } : { status: 503, body: 'maintenance' }));
    kit.startSender();
    const ep = await kit.register(host, { url: receiver.url });
    await deliveredTest(host, ep.id);
    const failed = await deliveredTest(host, ep.id);
    const activity = (await inject('GET', '/webhooks/endpoint-activity', host.auth)).json();
    const mine = activity.items.find((a: { endpointId: string }) => a.endpointId === ep.id);
    expect(mine).toMatchObject({
      lastHour: { attempts: 2, succeeded: 1 },
      lastDay: { attempts: 2, succeeded: 1 },
      lastFailure: { deliveryId: failed.id, responseStatus: 503, responseBody: 'maintenance' },
    });
    const others = (await inject('GET', '/webhooks/endpoint-activity', otherHost.auth)).json();
    expect(others.items.map((a: { endpointId: string }) => a.endpointId)).not.toContain(ep.id);
  });

  it('filters deliveries by event type and by time', async () => {
    const ep = await kit.register(host, { url: 'https://hooks.example.test/filters' });
    const before = new Date().toISOString();
    for (const eventType of ['webhook.test', 'booking.created', 'booking.created']) {
      expect((await inject('POST', `/webhooks/endpoints/${ep.id}/test`, host.auth, { eventType })).statusCode).toBe(202);
    }
    const list = async (q: string) =>
      (await inject('GET', `/webhooks/endpoints/${ep.id}/deliveries?${q}`, host.auth)).json().items as { eventType: string }[];
    expect((await list('eventType=booking.created')).map((d) => d.eventType)).toEqual(['booking.created', 'booking.created']);
    expect(await list(`until=${encodeURIComponent(before)}`)).toEqual([]);
    expect(await list(`since=${encodeURIComponent(before)}`)).toHaveLength(3);
    expect((await inject('GET', `/webhooks/endpoints/${ep.id}/deliveries?eventType=booking.exploded`, host.auth)).statusCode).toBe(400);
    expect((await inject('POST', `/webhooks/endpoints/${ep.id}/test`, host.auth, { eventType: 'booking.exploded' })).statusCode).toBe(400);
  });
});

describe('portal links', () => {
  it('a read-only link reads its host’s endpoints and deliveries, and changes nothing', async () => {
    const ep = await kit.register(host, { url: 'https://hooks.example.test/read' });
    const link = await makeLink(host, 'read', { label: 'Ana' });
    expect(link).toMatchObject({ access: 'read', state: 'live' });
    expect(link.url).toMatch(/^http:\/\/localhost(:\d+)?\/portal\/#link=whpl_/);

    const session = (await inject('GET', '/webhooks/portal/session', link.auth)).json();
    expect(session).toMatchObject({ host: { name: 'Hanna Host' }, via: 'link', access: 'read' });
    expect((await inject('GET', `/webhooks/endpoints/${ep.id}`, link.auth)).statusCode).toBe(200);
    expect((await inject('GET', `/webhooks/endpoints/${ep.id}/deliveries`, link.auth)).statusCode).toBe(200);
    for (const [method, url, payload] of [
      ['PATCH', `/webhooks/endpoints/${ep.id}`, { enabled: false }],
      ['POST', `/webhooks/endpoints/${ep.id}/rotate-secret`, undefined],
      ['POST', `/webhooks/endpoints/${ep.id}/test`, undefined],
      ['DELETE', `/webhooks/endpoints/${ep.id}`, undefined],
      ['POST', '/webhooks/endpoints', { url: 'https://hooks.example.test/new' }],
    ] as const) {
      expect((await inject(method, url, link.auth, payload)).statusCode, `${method} ${url}`).toBe(403);
    }
    expect((await inject('GET', `/webhooks/endpoints/${ep.id}`, host.auth)).json().enabled).toBe(true);
  });

  it('a full link acts as its host on its endpoints, but cannot make, list or revoke links', async () => {
    const ep = await kit.register(host, { url: 'https://hooks.example.test/full' });
    const link = await makeLink(host, 'full');
    const patched = await inject('PATCH', `/webhooks/endpoints/${ep.id}`, link.auth, { description: 'by the developer' });
    expect(patched.statusCode).toBe(200);
    expect(patched.json().description).toBe('by the developer');
    const rotated = await inject('POST', `/webhooks/endpoints/${ep.id}/rotate-secret`, link.auth);
    expect(rotated.statusCode).toBe(200);
    expect(rotated.json().secret).toMatch(/^whsec_/);
    expect((await inject('POST', '/webhooks/portal-links', link.auth, { access: 'full' })).statusCode).toBe(401);
    expect((await inject('GET', '/webhooks/portal-links', link.auth)).statusCode).toBe(401);
    expect((await inject('DELETE', `/webhooks/portal-links/${link.id}`, link.auth)).statusCode).toBe(401);
    expect((await inject('GET', '/admin/webhooks', link.auth)).statusCode).toBe(401);
  });

  it('stops working when revoked or expired, and every use, refused ones too, is recorded', async () => {
    const ep = await kit.register(host, { url: 'https://hooks.example.test/audit' });
    const link = await makeLink(host, 'read');
    expect((await inject('GET', `/webhooks/endpoints/${ep.id}`, link.auth)).statusCode).toBe(200);
    expect((await inject('PATCH', `/webhooks/endpoints/${ep.id}`, link.auth, { enabled: false })).statusCode).toBe(403);
    expect((await inject('DELETE', `/webhooks/portal-links/${link.id}`, otherHost.auth)).statusCode).toBe(404);
    expect((await inject('DELETE', `/webhooks/portal-links/${link.id}`, host.auth)).statusCode).toBe(204);
    const revoked = await inject('GET', `/webhooks/endpoints/${ep.id}`, link.auth);
    expect(revoked.statusCode).toBe(401);
    expect(revoked.json().detail).toMatch(/expired or was revoked/);

    const uses = await waitFor(
      async () => {
        const u = (await inject('GET', `/webhooks/portal-links/${link.id}/uses`, host.auth)).json().items;
        return u.length === 3 ? u : undefined;
      },
      5_000,
      'three uses',
    );
    expect(
      uses.map((u: { method: string; route: string; target: string; statusCode: number }) => [u.method, u.route, u.target, u.statusCode]),
    ).toEqual([
      ['GET', '/webhooks/endpoints/:id', ep.id, 401],
      ['PATCH', '/webhooks/endpoints/:id', ep.id, 403],
      ['GET', '/webhooks/endpoints/:id', ep.id, 200],
    ]);
    expect((await inject('GET', `/webhooks/portal-links/${link.id}/uses`, otherHost.auth)).statusCode).toBe(404);
    const listed = (await inject('GET', '/webhooks/portal-links', host.auth)).json().items;
    expect(listed.find((l: { id: string }) => l.id === link.id)).toMatchObject({ state: 'revoked', uses: 3 });

    const expiring = await makeLink(host, 'full');
    await t.db.db.execute(
      sql`update webhook_portal_links set expires_at = now() - interval '1 second' where public_id = ${expiring.id}::uuid`,
    );
    expect((await inject('GET', `/webhooks/endpoints/${ep.id}`, expiring.auth)).statusCode).toBe(401);
  });

  it('is deleted, with its uses, by the housekeeping once it ended longer ago than WEBHOOK_RETENTION_DAYS', async () => {
    const ep = await kit.register(host, { url: 'https://hooks.example.test/purge' });
    const live = await makeLink(host, 'read');
    const expired = await makeLink(host, 'read');
    const revoked = await makeLink(host, 'read');
    const recent = await makeLink(host, 'read');
    for (const l of [live, live, expired, revoked, recent])
      expect((await inject('GET', `/webhooks/endpoints/${ep.id}`, l.auth)).statusCode).toBe(200);
    const uses = async (id: string) =>
      (
        await t.db.db.execute<{ n: number }>(sql`select count(*)::int as n from webhook_portal_link_uses u
                                                  join webhook_portal_links l on l.id = u.link_id where l.public_id = ${id}::uuid`)
      ).rows[0]!.n;
    await waitFor(
      async () => (await uses(live.id)) === 2 && (await uses(expired.id)) + (await uses(revoked.id)) + (await uses(recent.id)) === 3,
      5_000,
      'the uses recorded',
    );
    // Forty days pass for one of the live link's uses and for three links; one link ended 5 days ago.
    await t.db.db.execute(sql`update webhook_portal_link_uses set at = now() - interval '40 days'
                               where id = (select min(u.id) from webhook_portal_link_uses u
                                             join webhook_portal_links l on l.id = u.link_id where l.public_id = ${live.id}::uuid)`);
    await t.db.db.execute(
      sql`update webhook_portal_links set expires_at = now() - interval '40 days' where public_id = ${expired.id}::uuid`,
    );
    await t.db.db.execute(
      sql`update webhook_portal_links set revoked_at = now() - interval '40 days' where public_id = ${revoked.id}::uuid`,
    );
    await t.db.db.execute(sql`update webhook_portal_links set expires_at = now() - interval '5 days' where public_id = ${recent.id}::uuid`);

    const counts = await housekeepOnce(t.db.db, {
      retentionDays: 7,
      chores: appChores(kit.senderConfig({ WEBHOOK_RETENTION_DAYS: '30' })),
    });
    expect(counts).toMatchObject({ portalLinkUses: 1, portalLinks: 2 });
    const left = (await inject('GET', '/webhooks/portal-links', host.auth)).json().items.map((l: { id: string }) => l.id);
    expect(left).toEqual(expect.arrayContaining([live.id, recent.id]));
    expect(left).not.toContain(expired.id);
    expect(left).not.toContain(revoked.id);
    expect([await uses(live.id), await uses(recent.id)]).toEqual([1, 1]);
    const { rows } = await t.db.db.execute<{ n: number }>(sql`select count(*)::int as n from webhook_portal_link_uses u
      where not exists (select 1 from webhook_portal_links l where l.id = u.link_id)`);
    expect(rows[0]!.n).toBe(0);
  });

  it('is only for hosts, within WEBHOOK_PORTAL_LINK_MAX_MINUTES, and keeps only a hash of its token', async () => {
    expect((await inject('POST', '/webhooks/portal-links', guest.auth, { access: 'read' })).statusCode).toBe(403);
    const tooLong = await inject('POST', '/webhooks/portal-links', host.auth, { access: 'read', expiresInMinutes: 1441 });
    expect(tooLong.statusCode).toBe(400);
    expect(tooLong.json().errors[0].path).toBe('body.expiresInMinutes');
    const link = await makeLink(host, 'read');
    const { rows } = await t.db.db.execute(sql`select * from webhook_portal_links where public_id = ${link.id}::uuid`);
    expect(JSON.stringify(rows)).not.toContain(link.token);
    expect((await inject('GET', '/webhooks/portal-links', host.auth)).body).not.toContain(link.token);
    expect(t.logs.text).not.toContain(link.token);
  });
});

describe('hosts kept apart on every route the portal uses', () => {
  it("answers 404 for another host's endpoint, delivery and link, by session and by link, and changes nothing", async () => {
    const receiver = await kit.receiver();
    kit.startSender();
    const mine = await kit.register(host, { url: receiver.url });
    const delivery = await deliveredTest(host, mine.id);
    const myLink = await makeLink(host, 'read');
    const theirFullLink = await makeLink(otherHost, 'full');

    const routes = [
      ['GET', `/webhooks/endpoints/${mine.id}`, undefined],
      ['PATCH', `/webhooks/endpoints/${mine.id}`, { enabled: false }],
      ['POST', `/webhooks/endpoints/${mine.id}/rotate-secret`, undefined],
      ['POST', `/webhooks/endpoints/${mine.id}/test`, { eventType: 'booking.created' }],
      ['GET', `/webhooks/endpoints/${mine.id}/deliveries`, undefined],
      ['POST', `/webhooks/endpoints/${mine.id}/recover`, { since: new Date(0).toISOString() }],
      ['GET', `/webhooks/deliveries/${delivery.id}`, undefined],
      ['POST', `/webhooks/deliveries/${delivery.id}/retry`, undefined],
      ['DELETE', `/webhooks/endpoints/${mine.id}`, undefined],
      ['GET', `/webhooks/portal-links/${myLink.id}/uses`, undefined],
      ['DELETE', `/webhooks/portal-links/${myLink.id}`, undefined],
    ] as const;
    for (const who of [otherHost.auth, theirFullLink.auth]) {
      for (const [method, url, payload] of routes) {
        if (url.includes('portal-links') && who === theirFullLink.auth) continue; // links need a session: 401, above
        const res = await inject(method, url, who, payload);
        expect(res.statusCode, `${who === otherHost.auth ? 'other host' : "other host's link"}: ${method} ${url}`).toBe(404);
      }
      const list = (await inject('GET', '/webhooks/endpoints?limit=100', who)).json();
      expect(list.items.map((e: { id: string }) => e.id)).not.toContain(mine.id);
    }
    const still = (await inject('GET', `/webhooks/endpoints/${mine.id}`, host.auth)).json();
    expect(still.enabled).toBe(true);
    expect((await inject('GET', `/webhooks/endpoints/${mine.id}/deliveries`, host.auth)).json().items).toHaveLength(1);
    expect(
      (await inject('GET', '/webhooks/portal-links', host.auth)).json().items.find((l: { id: string }) => l.id === myLink.id).state,
    ).toBe('live');
  });
});

describe('the portal page', () => {
  it('is served with a Content-Security-Policy that allows no inline script or style', async () => {
    for (const url of ['/portal/', '/portal/portal.js', '/portal/portal.css']) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode).toBe(200);
      const csp = String(res.headers['content-security-policy']);
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).not.toContain('unsafe-inline');
    }
    const html = (await t.app.inject({ method: 'GET', url: '/portal/' })).body;
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/);
    expect(html).not.toMatch(/\sstyle=/);
    expect(html).not.toMatch(/\son[a-z]+=/);
  });
});
