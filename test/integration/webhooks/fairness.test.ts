import { EventEmitter } from 'node:events';
import { sql } from 'drizzle-orm';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { webhookKit } from '../../helpers/webhooks.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * Fairness between hosts: one host's hanging endpoints and its flood of test events cost that
 * host, not the others; a host's endpoints and manual sends are capped.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_MAX_ENDPOINTS_PER_HOST: '10' });

const kit = webhookKit(t);
const { receiver, startSender } = kit;
const register = (session: Session, url: string) => kit.register(session, { url });
/** A booking event of `propertyId`; how many deliveries it made. */
const bookingEvent = async (propertyId: string) => (await kit.bookingEvent(propertyId)).created;

afterEach(() => kit.closeAll());

/** Earlier tests' endpoints, and what they still have due, out of the way: the sender sees this test's alone. */
const onlyNewEndpoints = () => t.db.db.execute(sql`update webhook_endpoints set enabled = false`);

let hostA: Session;
let hostB: Session;
let propertyA: string;
let propertyB: string;

beforeAll(async () => {
  hostA = await signUp(t.app, 'host', 'Anna Flood');
  hostB = await signUp(t.app, 'host', 'Ben Quiet');
  propertyA = (await listProperty(t.app, hostA)).id;
  propertyB = (await listProperty(t.app, hostB)).id;
});

describe('fairness between hosts', () => {
  it("a host's hanging endpoints and test events do not delay another host's delivery", async () => {
    const hanging = await receiver(() => ({ hang: true }));
    const endpoints = [];
    for (let i = 0; i < 10; i++) endpoints.push(await register(hostA, `${hanging.url}/${i}`));

    // 200 test events asked for; the host's budget lets WEBHOOK_MANUAL_SENDS_PER_MINUTE (10) through.
    const answers = [];
    for (let i = 0; i < 200; i++) {
      const ep = endpoints[i % endpoints.length]!;
      answers.push(await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/test`, headers: hostA.auth }));
    }
    expect(answers.filter((r) => r.statusCode === 202)).toHaveLength(10);
    const refused = answers.filter((r) => r.statusCode === 429);
    expect(refused).toHaveLength(190);
    expect(Number(refused[0]!.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(refused[0]!.json().code).toBe('rate_limited');

    // And its bookings: 20 events, 200 deliveries to endpoints that never answer.
    for (let i = 0; i < 20; i++) expect(await bookingEvent(propertyA)).toBe(10);

    // The defaults: 32 slots, 4 per endpoint. Host A's ten endpoints could hold 40 slots.
    startSender({ WEBHOOK_TIMEOUT_MS: '15000' });
    await waitFor(async () => hanging.received.length >= 8, 5_000, "host A's endpoints to hold their slots");

    const healthy = await receiver();
    await register(hostB, healthy.url);
    const sent = Date.now();
    expect(await bookingEvent(propertyB)).toBe(1);
    await waitFor(async () => healthy.received.length === 1, 5_000, "host B's delivery");
    // Timing is the behaviour: behind host A's hanging attempts it would have waited their 15 s timeout.
    expect(healthy.received[0]!.at - sent).toBeLessThan(5_000);
    expect(JSON.parse(healthy.received[0]!.body).data.propertyId).toBe(propertyB);
    // Host A held no more than its own share (WEBHOOK_HOST_CONCURRENCY, 8) of the 32 slots.
    expect(hanging.received).toHaveLength(8);
  });

  it("ten hosts with ten hanging endpoints each leave slots for another host's first attempt", async () => {
    await onlyNewEndpoints();
    // Each host under its own cap (8), together more than the 32 slots: 10 × 8 = 80.
    const hanging = await receiver(() => ({ hang: true }));
    const owners = await Promise.all(Array.from({ length: 10 }, (_, i) => signUp(t.app, 'host', `Owner ${i}`)));
    for (const [i, owner] of owners.entries()) {
      const property = (await listProperty(t.app, owner)).id;
      for (let e = 0; e < 10; e++) await register(owner, `${hanging.url}/${i}/${e}`);
      for (let b = 0; b < 5; b++) expect(await bookingEvent(property)).toBe(10);
    }
    const sender = startSender({ WEBHOOK_TIMEOUT_MS: '15000' });
    // Every slot they may take, held: 32 less the 4 kept for hosts with nothing in flight.
    await waitFor(async () => hanging.received.length >= 28, 10_000, 'the hanging endpoints to hold their slots');
    const held = sender.events.slots();
    expect(held).toMatchObject({ inFlight: 28, ownersInFlight: 10, ownersAtCap: 0 });
    // Spread between them, fewest in flight first: 2 or 3 each, not four hosts at 8.
    expect(held.topOwners[0]).toBe(3);

    const quiet = await signUp(t.app, 'host', 'Quinn Quiet');
    const healthy = await receiver();
    await register(quiet, healthy.url);
    const sent = Date.now();
    expect(await bookingEvent((await listProperty(t.app, quiet)).id)).toBe(1);
    await waitFor(async () => healthy.received.length === 1, 5_000, "the quiet host's delivery");
    // Behind the others' hanging attempts it would have waited for their 15 s timeouts, or longer.
    expect(healthy.received[0]!.at - sent).toBeLessThan(5_000);
    expect(hanging.received).toHaveLength(28);

    // The worker's /metrics says so, by counts and ranks: ten owners at 2 or 3, none at its cap.
    const metrics = createWorkerMetrics(new EventEmitter(), { webhooks: sender.events });
    const text = await metrics.registry.metrics();
    metrics.detach();
    expect(text).toMatch(/^stayhub_webhook_owners_in_flight 1[01]$/m); // and the quiet host's, unless it is recorded already
    expect(text).toMatch(/^stayhub_webhook_owners_at_cap 0$/m);
    expect(text).toMatch(/^stayhub_webhook_owner_slots_in_use\{rank="1"\} 3$/m);
    expect(text).toMatch(/^stayhub_webhook_owner_slots_in_use\{rank="5"\} 3$/m);
  });

  it('a host has exactly WEBHOOK_HOST_CONCURRENCY attempts in flight, not one more, and holds at most eight times that', async () => {
    await onlyNewEndpoints();
    const hanging = await receiver(() => ({ hang: true }));
    const owner = await signUp(t.app, 'host');
    const property = (await listProperty(t.app, owner)).id;
    for (let e = 0; e < 10; e++) await register(owner, `${hanging.url}/cap/${e}`);
    for (let b = 0; b < 10; b++) expect(await bookingEvent(property)).toBe(10); // 100 due, 10 endpoints
    // Room to spare everywhere else: 32 slots, 4 per endpoint (40 for ten), none kept for quiet hosts.
    const sender = startSender({ WEBHOOK_HOST_CONCURRENCY: '3', WEBHOOK_IDLE_OWNER_SLOTS: '0', WEBHOOK_TIMEOUT_MS: '15000' });
    await waitFor(async () => hanging.received.length >= 3, 10_000, "the host's attempts");
    // Attempts start synchronously, all that may start at once: a fourth would be in flight already.
    expect(sender.events.slots()).toMatchObject({ inFlight: 3, ownersInFlight: 1, ownersAtCap: 1, topOwners: [3] });
    // Claimed, in flight and queued together: the cap times the claim-ahead factor (8), no more.
    expect(sender.events.slots().inFlight + sender.events.slots().queued).toBe(24);
    const { rows } = await t.db.db.execute<{ n: number }>(
      sql`select count(*)::int as n from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
           where e.url like ${`${hanging.url}/cap/%`} and d.claim_id is not null and d.status = 'pending'`,
    );
    expect(rows[0]!.n).toBe(24);
    expect(hanging.received).toHaveLength(3);
  });

  it('refuses an endpoint past WEBHOOK_MAX_ENDPOINTS_PER_HOST with a 409 naming the cap', async () => {
    const host = await signUp(t.app, 'host');
    for (let i = 0; i < 10; i++) await register(host, `https://hooks.example.test/${i}`);
    const res = await t.app.inject({
      method: 'POST',
      url: '/webhooks/endpoints',
      headers: host.auth,
      payload: { url: 'https://hooks.example.test/eleventh' },
    });
    expect(res.statusCode, res.body).toBe(409);
    expect(res.json().detail).toMatch(/at most 10 .*WEBHOOK_MAX_ENDPOINTS_PER_HOST/);
    const { rows } = await t.db.db.execute<{ n: number }>(
      sql`select count(*)::int as n from webhook_endpoints where host_id = (select id from users where email = ${host.user.email})`,
    );
    expect(rows[0]!.n).toBe(10);
  });

  it('registers no more than the cap when registrations race', async () => {
    const host = await signUp(t.app, 'host');
    const all = await Promise.all(
      Array.from({ length: 14 }, (_, i) =>
        t.app.inject({
          method: 'POST',
          url: '/webhooks/endpoints',
          headers: host.auth,
          payload: { url: `https://hooks.example.test/r${i}` },
        }),
      ),
    );
    expect(all.filter((r) => r.statusCode === 201)).toHaveLength(10);
    expect(all.filter((r) => r.statusCode === 409)).toHaveLength(4);
  });

  it('limits retries and recovers per host, each with its own budget, and answers 429 with Retry-After', async () => {
    const host = await signUp(t.app, 'host');
    const ep = await register(host, 'https://hooks.example.test/budget');
    const since = new Date(0).toISOString();
    const recovers = [];
    for (let i = 0; i < 11; i++) {
      recovers.push(
        await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/recover`, headers: host.auth, payload: { since } }),
      );
    }
    expect(recovers.slice(0, 10).map((r) => r.statusCode)).toEqual(Array(10).fill(202));
    expect(recovers[10]!.statusCode).toBe(429);
    expect(Number(recovers[10]!.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // Retries have a budget of their own, untouched by the recovers.
    const test = await t.app.inject({ method: 'POST', url: `/webhooks/endpoints/${ep.id}/test`, headers: host.auth });
    expect(test.statusCode).toBe(202);
    const retries = [];
    for (let i = 0; i < 11; i++) {
      retries.push(
        (await t.app.inject({ method: 'POST', url: `/webhooks/deliveries/${test.json().id}/retry`, headers: host.auth })).statusCode,
      );
    }
    expect(retries).toEqual([...Array(10).fill(202), 429]);
    // Another host's budget is untouched.
    const other = await signUp(t.app, 'host');
    const theirs = await register(other, 'https://hooks.example.test/theirs');
    const res = await t.app.inject({
      method: 'POST',
      url: `/webhooks/endpoints/${theirs.id}/recover`,
      headers: other.auth,
      payload: { since },
    });
    expect(res.statusCode).toBe(202);
  });
});
