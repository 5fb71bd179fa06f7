import { sql } from 'drizzle-orm';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import type { ReceivedWebhook } from '../../helpers/webhook-receiver.ts';
import { webhookKit } from '../../helpers/webhooks.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A host's rate per endpoint (rateLimitPerSecond): no more attempts start in a second than it
 * says, across every sender; what it holds back waits its turn and is no failed attempt; the
 * host's other endpoints go at full speed. Timing is the behaviour, measured at real receivers on
 * 127.0.0.1, with margins for a busy machine.
 *
 * Slow (about 12 s alone): timing is the behaviour: attempts are counted per second at real
 * receivers, over seconds.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
const kit = webhookKit(t);

afterEach(() => kit.closeAll());

let host: Session;
let property: string;

beforeAll(async () => {
  host = await signUp(t.app, 'host', 'Rita Rate');
  property = (await listProperty(t.app, host)).id;
});

/** Earlier tests' endpoints, and what they still have due, out of the way. */
const onlyNewEndpoints = () => t.db.db.execute(sql`update webhook_endpoints set enabled = false`);

/** The most requests that arrived within any 1 s, measured from each request. */
function busiestSecond(received: readonly ReceivedWebhook[]): number {
  const at = received.map((r) => r.at).sort((a, b) => a - b);
  return Math.max(0, ...at.map((start) => at.filter((x) => x >= start && x < start + 1000).length));
}

async function attemptsOf(endpointId: string): Promise<{ status: string; attempts: number }[]> {
  const { rows } = await t.db.db.execute<{ status: string; attempts: number }>(sql`
    select d.status, d.attempts from webhook_deliveries d
      join webhook_endpoints e on e.id = d.endpoint_id
     where e.public_id = ${endpointId}::uuid`);
  return rows;
}

/**
 * The endpoint's deliveries once none is still pending: the receiver has a request before the
 * sender has its answer and records the outcome, so the last delivery may be seen in flight.
 */
async function settledAttemptsOf(endpointId: string): Promise<{ status: string; attempts: number }[]> {
  await waitFor(async () => (await attemptsOf(endpointId)).every((r) => r.status !== 'pending'), 10_000, 'outcomes recorded');
  return attemptsOf(endpointId);
}

const distinctIds = (received: readonly ReceivedWebhook[]) => new Set(received.map((r) => r.headers['webhook-id'])).size;

describe('the rate field', () => {
  it('is set on create, changed and cleared on update, and returned', async () => {
    const created = await kit.register(host, { url: 'https://hooks.example.com/rated', rateLimitPerSecond: 5 });
    expect(created).toMatchObject({ rateLimitPerSecond: 5 });
    const patch = (payload: Record<string, unknown>) =>
      t.app.inject({ method: 'PATCH', url: `/webhooks/endpoints/${created.id}`, headers: host.auth, payload });
    expect((await patch({ rateLimitPerSecond: 1000 })).json()).toMatchObject({ rateLimitPerSecond: 1000 });
    expect((await patch({ rateLimitPerSecond: null })).json()).toMatchObject({ rateLimitPerSecond: null });
    const plain = await kit.register(host, { url: 'https://hooks.example.com/plain' });
    expect(plain).toMatchObject({ rateLimitPerSecond: null });
  });

  it('refuses 0, 1001, a fraction and a string, naming the field', async () => {
    const ep = await kit.register(host, { url: 'https://hooks.example.com/refused' });
    for (const rate of [0, 1001, 2.5, 'x']) {
      const create = await t.app.inject({
        method: 'POST',
        url: '/webhooks/endpoints',
        headers: host.auth,
        payload: { url: 'https://hooks.example.com/bad', rateLimitPerSecond: rate },
      });
      expect(create.statusCode, String(rate)).toBe(400);
      expect(create.json().errors.map((e: { path: string }) => e.path)).toContain('body.rateLimitPerSecond');
      const update = await t.app.inject({
        method: 'PATCH',
        url: `/webhooks/endpoints/${ep.id}`,
        headers: host.auth,
        payload: { rateLimitPerSecond: rate },
      });
      expect(update.statusCode, String(rate)).toBe(400);
      expect(update.json().errors.map((e: { path: string }) => e.path)).toContain('body.rateLimitPerSecond');
    }
  });
});

describe('the sender keeps to the rate', () => {
  it('starts at most 5 a second for an endpoint limited to 5/s, each once, no attempt lost; the unlimited one beside it is not slowed', async () => {
    await onlyNewEndpoints();
    const limitedAt = await kit.receiver();
    const freeAt = await kit.receiver();
    const limited = await kit.register(host, { url: limitedAt.url, rateLimitPerSecond: 5 });
    const free = await kit.register(host, { url: freeAt.url });
    // 30 deliveries waiting for each endpoint before the sender starts (a backlog draining).
    for (let i = 0; i < 30; i++) expect((await kit.bookingEvent(property)).created).toBe(2);

    const started = Date.now();
    kit.startSender();
    await waitFor(async () => freeAt.received.length === 30, 20_000, "the unlimited endpoint's 30");
    const freeDone = Date.now() - started;
    await waitFor(async () => limitedAt.received.length === 30, 30_000, "the limited endpoint's 30");

    const at = limitedAt.received.map((r) => r.at);
    // 30 at 5/s: the first five at once at most, then one every 200 ms, so 5 s at the least.
    expect(Math.max(...at) - Math.min(...at)).toBeGreaterThanOrEqual(5_000);
    expect(busiestSecond(limitedAt.received)).toBeLessThanOrEqual(6);
    expect(distinctIds(limitedAt.received)).toBe(30);
    const rows = await settledAttemptsOf(limited.id);
    expect(rows).toHaveLength(30);
    expect(
      rows.every((r) => r.status === 'succeeded' && r.attempts === 1),
      JSON.stringify(rows),
    ).toBe(true);

    // The unlimited endpoint had its 30 long before the limited one could have (≥ 5.8 s).
    expect(freeDone).toBeLessThan(3_000);
    expect(distinctIds(freeAt.received)).toBe(30);
    expect((await settledAttemptsOf(free.id)).every((r) => r.attempts === 1)).toBe(true);
  });

  it('holds across two senders sharing the database', async () => {
    await onlyNewEndpoints();
    const limitedAt = await kit.receiver();
    const limited = await kit.register(host, { url: limitedAt.url, rateLimitPerSecond: 5 });
    for (let i = 0; i < 30; i++) expect((await kit.bookingEvent(property)).created).toBe(1);

    kit.startSender();
    kit.startSender();
    await waitFor(async () => limitedAt.received.length === 30, 30_000, "the limited endpoint's 30");

    const at = limitedAt.received.map((r) => r.at);
    expect(Math.max(...at) - Math.min(...at)).toBeGreaterThanOrEqual(5_000);
    expect(busiestSecond(limitedAt.received)).toBeLessThanOrEqual(6);
    expect(distinctIds(limitedAt.received)).toBe(30);
    expect((await settledAttemptsOf(limited.id)).every((r) => r.status === 'succeeded' && r.attempts === 1)).toBe(true);
  });
});
