import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'drizzle-orm';
import { ROOT_CONTEXT, SpanKind, trace, TraceFlags } from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EdgePropagator } from '../../../src/telemetry/edge.ts';
import { startTelemetry, type Telemetry } from '../../../src/telemetry/sdk.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { daysFromNow, listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * Trace context from outside, with the default OTEL_TRUST_INCOMING_TRACE=false: a guest's
 * `traceparent`/`tracestate` steer nothing. The request is the root of a new trace sampled by our
 * sampler, the guest's span is only a link on it, and neither the outbox row, the webhook delivery
 * row nor the host's receiver sees any of the guest's values. Real PostgreSQL, a real receiver.
 * (edge-trusted.test.ts: the same request with the setting on.)
 */

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry | undefined;
beforeAll(() => {
  // Before the app is built: @fastify/otel registers itself on every Fastify instance made after the start.
  telemetry = startTelemetry({ serviceName: 'stayhub-test', spanProcessors: [new SimpleSpanProcessor({ exporter })] });
});
const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
let receiver: WebhookReceiver;
beforeAll(async () => {
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await telemetry?.shutdown();
});

const GUEST_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const GUEST_SPAN = '00f067aa0ba902b7';
// A tracestate as long as a guest may make it: their own text, which must reach nobody.
const GUEST_STATE = `guest=${'x'.repeat(240)},evil=${'y'.repeat(240)}`;

const spans = () => exporter.getFinishedSpans();

describe('a request with a guest-made trace context', () => {
  let host: Session;
  let guest: Session;
  let propertyId: string;
  beforeAll(async () => {
    host = await signUp(t.app, 'host');
    guest = await signUp(t.app, 'guest');
    propertyId = (await listProperty(t.app, host)).id;
    const endpoint = await t.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: host.auth, payload: { url: receiver.url } });
    expect(endpoint.statusCode, endpoint.body).toBe(201);
  });

  /** A booking whose request carries the guest's headers; its request span and its outbox row. */
  async function book(flags: '00' | '01', nights: number) {
    exporter.reset();
    const res = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: { ...guest.auth, traceparent: `00-${GUEST_TRACE}-${GUEST_SPAN}-${flags}`, tracestate: GUEST_STATE },
      payload: { propertyId, checkIn: daysFromNow(nights), checkOut: daysFromNow(nights + 2), guests: 1 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const request = await waitFor(async () => spans().find((s) => s.name === 'POST /bookings'), 10_000, 'the request span');
    const { rows } = await t.db.db.execute<{ traceparent: string | null; tracestate: string | null; row: string }>(
      sql`select traceparent, tracestate, o::text as row from outbox o where key = ${res.json().id as string} and topic = 'booking.created'`,
    );
    expect(rows).toHaveLength(1);
    return { request, outbox: rows[0]! };
  }

  /** The request's span: a root of our own, sampled, the guest's span a link without its tracestate. */
  function expectOwnRoot(request: ReadableSpan) {
    expect(request.kind).toBe(SpanKind.SERVER);
    expect(request.spanContext().traceId).not.toBe(GUEST_TRACE);
    expect(request.parentSpanContext).toBeUndefined();
    expect(request.spanContext().traceState).toBeUndefined();
    expect(request.links).toHaveLength(1);
    expect(request.links[0]!.context).toMatchObject({ traceId: GUEST_TRACE, spanId: GUEST_SPAN });
    expect(request.links[0]!.context.traceState).toBeUndefined();
    expect(spans().some((s) => s.spanContext().traceId === GUEST_TRACE)).toBe(false);
  }

  it('starts a trace of our own, keeps the guest span as a link, and stores and sends none of its values', async () => {
    const { request, outbox } = await book('01', 20);
    expectOwnRoot(request);
    const traceId = request.spanContext().traceId;
    expect(outbox.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(outbox.tracestate).toBeNull();
    expect(outbox.row).not.toContain(GUEST_TRACE);

    const code = await drainOutbox({
      argv: ['--until-empty'],
      env: {
        DATABASE_URL: t.db.url,
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
        POLL_INTERVAL_MS: '50',
        LOG_LEVEL: 'silent',
        MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
      },
      out: () => {},
      err: () => {},
    });
    expect(code).toBe(0);
    const got = await waitFor(async () => receiver.received[0], 10_000, 'the webhook request');

    const { rows: deliveries } = await t.db.db.execute<{ traceparent: string | null; tracestate: string | null }>(
      sql`select traceparent, tracestate from webhook_deliveries`,
    );
    expect(deliveries).toHaveLength(1);
    expect(deliveries[0]!.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(deliveries[0]!.tracestate).toBeNull();

    // The host gets StayHub's traceparent, in StayHub's trace, and no tracestate at all.
    expect(got.headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(got.headers).not.toHaveProperty('tracestate');
    const sent = JSON.stringify(got);
    for (const guestValue of [GUEST_TRACE, GUEST_SPAN, 'guest=', 'evil=']) expect(sent).not.toContain(guestValue);
  });

  it('records a request whose traceparent says "not sampled": the guest does not switch tracing off', async () => {
    const { request, outbox } = await book('00', 30);
    expectOwnRoot(request);
    expect(request.spanContext().traceFlags & TraceFlags.SAMPLED).toBe(TraceFlags.SAMPLED);
    expect(outbox.traceparent).toMatch(new RegExp(`^00-${request.spanContext().traceId}-[0-9a-f]{16}-01$`));
  });

  it("keeps a tracestate out of what goes to hosts even when one is in the context (a trusted caller's)", () => {
    const ctx = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
      traceFlags: TraceFlags.SAMPLED,
      traceState: new TraceState('guest=abc'),
    });
    const headers: Record<string, string> = {};
    new EdgePropagator(true).inject(ctx, headers, { set: (c, k, v) => (c[k] = v) });
    expect(headers).toEqual({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
  });
});
