import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { HandlerCatalogue } from '../../../src/outbox/index.ts';
import { createDatabase } from '../../../src/db/client.ts';
import { registerOutboxGauges } from '../../../src/metrics/outbox-gauges.ts';
import { daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';

const t = useTestApp();

async function scrape(): Promise<string> {
  const res = await t.app.inject({ method: 'GET', url: '/metrics' });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.body;
}

/** The value of one series in Prometheus text, or undefined if the series is absent. */
function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function insert(topic: string, status: 'PENDING' | 'DEAD' | 'DONE', ageSeconds = 0) {
  await t.db.pool.query(
    `insert into outbox (topic, payload, status, created_at, available_at, processed_at)
     values ($1, '{}', $2, now() - make_interval(secs => $3), now(), case when $2 = 'PENDING' then null else now() end)`,
    [topic, status, ageSeconds],
  );
}

describe('GET /metrics on the API', () => {
  it('is Prometheus text with the outbox, booking, HTTP and process families', async () => {
    const text = await scrape();
    for (const family of [
      'stayhub_outbox_messages',
      'stayhub_outbox_leased_messages',
      'stayhub_outbox_done_last_hour',
      'stayhub_outbox_oldest_pending_age_seconds',
      'stayhub_outbox_unknown_topic_messages',
      'stayhub_outbox_stats_up',
      'http_request_duration_seconds',
      'stayhub_booking_requests_total',
      'process_cpu_seconds_total',
    ]) {
      expect(text, family).toMatch(new RegExp(`^# TYPE ${family} `, 'm'));
    }
    // Every handled topic has its series from the start, at 0, so alerts compare numbers.
    expect(value(text, 'stayhub_outbox_messages{status="dead",topic="booking.cancelled"}')).toBe(0);
    expect(value(text, 'stayhub_booking_requests_total{status_code="409"}')).toBe(0);
  });

  it('counts booking outcomes by status code and times requests by route pattern', async () => {
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host, { maxGuests: 2 });
    const book = (checkIn: number, checkOut: number, guests = 2) =>
      t.app.inject({
        method: 'POST',
        url: '/bookings',
        headers: guest.auth,
        payload: { propertyId: property.id, checkIn: daysFromNow(checkIn), checkOut: daysFromNow(checkOut), guests },
      });
    expect((await book(10, 12)).statusCode).toBe(201);
    expect((await book(11, 13)).statusCode).toBe(409);
    expect((await book(20, 22, 3)).statusCode).toBe(422);
    expect((await t.app.inject({ method: 'GET', url: `/properties/${property.id}` })).statusCode).toBe(200);
    expect((await t.app.inject({ method: 'GET', url: '/no/such/route/12345' })).statusCode).toBe(404);

    const text = await scrape();
    expect(value(text, 'stayhub_booking_requests_total{status_code="201"}')).toBe(1);
    expect(value(text, 'stayhub_booking_requests_total{status_code="409"}')).toBe(1);
    expect(value(text, 'stayhub_booking_requests_total{status_code="422"}')).toBe(1);
    expect(value(text, 'http_request_duration_seconds_count{method="POST",route="/bookings",status_code="201"}')).toBe(1);
    // The pattern, not the URL: one series for every property id.
    expect(value(text, 'http_request_duration_seconds_count{method="GET",route="/properties/:id",status_code="200"}')).toBe(1);
    expect(text).not.toContain(property.id);
    // A URL no route matched does not become a label of its own.
    expect(value(text, 'http_request_duration_seconds_count{method="GET",route="unmatched",status_code="404"}')).toBe(1);
    expect(text).not.toContain('/no/such/route');
  });

  it('outbox gauges match the table, by status and topic', async () => {
    await t.db.pool.query('delete from outbox');
    await insert('booking.created', 'PENDING', 300);
    await insert('booking.created', 'PENDING', 10);
    await insert('booking.created', 'DEAD');
    await insert('property.changed', 'DONE');
    await insert('listing.teleported', 'PENDING', 50);
    // The app's gauges keep a read for 5 s and an earlier test scraped them: read these through a
    // registry of our own without a cache (the cache has its own test below).
    const registry = new Registry();
    registerOutboxGauges(registry, { db: t.db.db, catalogue: new HandlerCatalogue([{ name: 'h', topic: 'booking.created' }]), cacheMs: 0 });
    const text = await registry.metrics();
    expect(value(text, 'stayhub_outbox_messages{status="pending",topic="booking.created"}')).toBe(2);
    expect(value(text, 'stayhub_outbox_messages{status="dead",topic="booking.created"}')).toBe(1);
    expect(value(text, 'stayhub_outbox_messages{status="pending",topic="property.changed"}')).toBe(0);
    expect(value(text, 'stayhub_outbox_done_last_hour{topic="property.changed"}')).toBe(1);
    expect(value(text, 'stayhub_outbox_oldest_pending_age_seconds{topic="booking.created"}')).toBeGreaterThanOrEqual(300);
    expect(value(text, 'stayhub_outbox_oldest_pending_age_seconds{topic="property.changed"}')).toBe(0);
    expect(value(text, 'stayhub_outbox_unknown_topic_messages{topic="listing.teleported"}')).toBe(1);
    expect(value(text, 'stayhub_outbox_unknown_topic_messages{topic="booking.created"}')).toBeUndefined();
    expect(value(text, 'stayhub_outbox_stats_up')).toBe(1);
  });

  it('reads the database on scrape, at most once per cache period', async () => {
    await t.db.pool.query('delete from outbox');
    let clock = 1_000_000;
    let reads = 0;
    // outboxStats's statement, counted on its way to the pool behind the database
    const pool = t.db.pool;
    const query = (config: { name?: string }, ...rest: unknown[]) => (
      config.name === 'outbox-stats-by-topic' && reads++,
      (pool.query as (...a: unknown[]) => Promise<unknown>).call(pool, config, ...rest)
    );
    const counting = {
      ...t.db.db,
      $client: new Proxy(pool, { get: (target, key): unknown => (key === 'query' ? query : Reflect.get(target, key)) }),
    } as unknown as typeof t.db.db;
    const registry = new Registry();
    registerOutboxGauges(registry, { db: counting, catalogue: new HandlerCatalogue([]), cacheMs: 5_000, now: () => clock });
    expect(reads).toBe(0); // nothing is read until someone scrapes

    await insert('booking.created', 'PENDING');
    const first = await registry.metrics();
    expect(reads).toBe(1); // one query feeds all six gauges
    expect(value(first, 'stayhub_outbox_messages{status="pending",topic="booking.created"}')).toBe(1);

    await insert('booking.created', 'PENDING');
    clock += 4_000;
    const cached = await Promise.all([registry.metrics(), registry.metrics()]);
    expect(reads).toBe(1);
    for (const text of cached) expect(value(text, 'stayhub_outbox_messages{status="pending",topic="booking.created"}')).toBe(1);

    clock += 1_001;
    const fresh = await registry.metrics();
    expect(reads).toBe(2);
    expect(value(fresh, 'stayhub_outbox_messages{status="pending",topic="booking.created"}')).toBe(2);
  });

  it('says so, rather than showing stale numbers, when the database cannot be read', async () => {
    const unreachable = createDatabase('postgres://postgres:x@127.0.0.1:1/nothing');
    const errors: unknown[] = [];
    try {
      const registry = new Registry();
      registerOutboxGauges(registry, {
        db: unreachable.db,
        catalogue: new HandlerCatalogue([{ name: 'h', topic: 'booking.created' }]),
        onError: (e) => errors.push(e),
      });
      const text = await registry.metrics();
      expect(value(text, 'stayhub_outbox_stats_up')).toBe(0);
      expect(text).not.toMatch(/^stayhub_outbox_messages\{/m);
      expect(errors).toHaveLength(1);
    } finally {
      await unreachable.close();
    }
  });
});
