import { sql } from 'drizzle-orm';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTelemetry, type Telemetry } from '../../../src/telemetry/sdk.ts';
import { daysFromNow, listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * OTEL_TRUST_INCOMING_TRACE=true (a gateway of our own in front): the caller's traceparent is the
 * request's parent and its sampled flag decides. The default is edge.test.ts.
 */

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry | undefined;
beforeAll(() => {
  telemetry = startTelemetry({
    serviceName: 'stayhub-test',
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
    trustIncomingTrace: true,
  });
});
const t = useTestApp();
afterAll(async () => {
  await telemetry?.shutdown();
});

const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';
const spans = () => exporter.getFinishedSpans();

describe('with OTEL_TRUST_INCOMING_TRACE on', () => {
  let guest: Session;
  let propertyId: string;
  beforeAll(async () => {
    const host = await signUp(t.app, 'host');
    guest = await signUp(t.app, 'guest');
    propertyId = (await listProperty(t.app, host)).id;
  });

  const book = (flags: '00' | '01', nights: number) =>
    t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guest.auth, traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-${flags}` },
      payload: { propertyId, checkIn: daysFromNow(nights), checkOut: daysFromNow(nights + 2), guests: 1 },
    });

  it("continues the caller's trace, as the child of its span", async () => {
    exporter.reset();
    const res = await book('01', 20);
    expect(res.statusCode, res.body).toBe(201);
    const request = await waitFor(async () => spans().find((s) => s.name === 'POST /bookings'), 10_000, 'the request span');
    expect(request.spanContext().traceId).toBe(CALLER_TRACE);
    expect(request.parentSpanContext?.spanId).toBe(CALLER_SPAN);
    expect(request.links).toHaveLength(0);
    const { rows } = await t.db.db.execute<{ traceparent: string | null }>(
      sql`select traceparent from outbox where key = ${res.json().id as string} and topic = 'booking.created'`,
    );
    expect(rows[0]!.traceparent).toMatch(new RegExp(`^00-${CALLER_TRACE}-[0-9a-f]{16}-01$`));
  });

  it("leaves a request unrecorded when the caller's traceparent says so", async () => {
    exporter.reset();
    const res = await book('00', 30);
    expect(res.statusCode, res.body).toBe(201);
    // The booking's own spans would be finished before its reply; a later request's prove the exporter is working.
    const read = await t.app.inject({ method: 'GET', url: `/bookings/${res.json().id as string}`, headers: guest.auth });
    expect(read.statusCode).toBe(200);
    await waitFor(async () => spans().some((s) => s.name === 'GET /bookings/:id'), 10_000, 'the next request span');
    expect(spans().filter((s) => s.name === 'POST /bookings')).toHaveLength(0);
    const { rows } = await t.db.db.execute<{ traceparent: string | null }>(
      sql`select traceparent from outbox where key = ${res.json().id as string} and topic = 'booking.created'`,
    );
    expect(rows[0]!.traceparent).toMatch(new RegExp(`^00-${CALLER_TRACE}-[0-9a-f]{16}-00$`));
  });
});
