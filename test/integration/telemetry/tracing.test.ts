import { sql } from 'drizzle-orm';
import { SpanKind, type HrTime } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replayDeadLetters } from '../../../src/events/handle-event.ts';
import { openDeadLetters, recordDeadLetter } from '../../../src/events/dead-letters.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { fromParts } from '../../../src/events/event.ts';
import type { Handler } from '../../../src/outbox/index.ts';
import { startTelemetry, type Telemetry } from '../../../src/telemetry/sdk.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * One booking, followed by its trace: the SDK with an in-memory exporter, the API (Fastify), the
 * worker (outbox handlers, the webhook sender), the relay into a real nats-server and the earnings
 * consumer, all in this process, against real PostgreSQL and a real HTTP receiver.
 */

const skip = skipWithoutNats();
const exporter = new InMemorySpanExporter();
let telemetry: Telemetry | undefined;

// Before the app is built: @fastify/otel registers itself on every Fastify instance made after the start.
beforeAll(() => {
  telemetry = startTelemetry({ serviceName: 'stayhub-test', spanProcessors: [new SimpleSpanProcessor({ exporter })] });
});
const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
const nats = useNats(skip);
let receiver: WebhookReceiver;
beforeAll(async () => {
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await telemetry?.shutdown();
});

const STREAM = freshStream('T');
const env = (extra: Record<string, string> = {}) =>
  eventsEnv(t.db.url, nats.url, STREAM, {
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    BACKOFF_BASE_SECONDS: '0.05',
    LOG_LEVEL: 'silent',
    ...extra,
  });

/** Fails its first run of each message, so the message is retried (the retry runs only this handler). */
const failedOnce = new Set<string>();
const failsOnce = (): Handler<any>[] => [
  {
    name: 'test.fails-once',
    topic: 'booking.created',
    async handle({ messageId }) {
      if (failedOnce.has(messageId)) return;
      failedOnce.add(messageId);
      throw new Error('test: first run fails');
    },
  },
];

const spans = () => exporter.getFinishedSpans();
const inTrace = (traceId: string) => spans().filter((s) => s.spanContext().traceId === traceId);
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const ms = (t: HrTime) => t[0] * 1000 + t[1] / 1e6;
/** A query span's SQL, under the attribute name the instrumentation's semantic conventions use. */
const sqlOf = (s: ReadableSpan) => {
  const text = s.attributes['db.query.text'] ?? s.attributes['db.statement'];
  return typeof text === 'string' ? text : '';
};

/** The one span named `name` (or matching it) in `list`; fails listing what there is. */
function one(list: ReadableSpan[], name: string | RegExp): ReadableSpan {
  const found = list.filter((s) => (typeof name === 'string' ? s.name === name : name.test(s.name)));
  expect(found.length, `${String(name)} among: ${list.map((s) => s.name).join(', ')}`).toBe(1);
  return found[0]!;
}

/** True when `ancestor` is `s` or above it in the same trace. */
function descends(s: ReadableSpan, ancestor: ReadableSpan, all: ReadableSpan[]): boolean {
  const byId = new Map(all.map((x) => [x.spanContext().spanId, x]));
  for (let at: ReadableSpan | undefined = s; at; at = byId.get(parentOf(at) ?? '')) {
    if (at === ancestor) return true;
  }
  return false;
}

describe.skipIf(skip)('one booking, one trace', () => {
  it('holds the request, its SQL, the handling, the email, the publish, the consumer and the webhook; a retry is a linked trace', async () => {
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host);
    const endpoint = await t.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: host.auth, payload: { url: receiver.url } });
    expect(endpoint.statusCode, endpoint.body).toBe(201);
    exporter.reset();

    const res = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: guest.auth,
      payload: { propertyId: property.id, checkIn: daysFromNow(20), checkOut: daysFromNow(23), guests: 1 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const request = await waitFor(async () => spans().find((s) => s.name === 'POST /bookings'), 10_000, 'the request span');
    expect(request.kind).toBe(SpanKind.SERVER);
    const traceId = request.spanContext().traceId;

    // The booking's transaction stored the context of a span of this trace on the outbox row.
    const { rows } = await t.db.db.execute<{ traceparent: string | null; id: string }>(
      sql`select traceparent, public_id as id from outbox where topic = 'booking.created' order by id desc limit 1`,
    );
    expect(rows[0]!.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    const storedSpanId = rows[0]!.traceparent!.split('-')[2]!;
    const messageId = rows[0]!.id;

    expect(await drainOutbox({ argv: ['--until-empty'], env: env(), extraHandlers: failsOnce, out: () => {}, err: () => {} })).toBe(0);
    expect(await earningsMain({ argv: ['--until-empty'], env: env(), out: () => {}, err: () => {} })).toBe(0);

    const trace = await waitFor(
      async () => {
        const all = inTrace(traceId);
        return (
          all.some((s) => s.name.startsWith('send webhook')) && all.some((s) => s.name.startsWith(`process ${STREAM.toLowerCase()}`)) && all
        );
      },
      10_000,
      'the consumer and webhook spans',
    );

    // The transaction's SQL: the booking and its outbox row in one statement, under the request.
    const insert = trace.find((s) => /insert into outbox/i.test(sqlOf(s)));
    expect(insert, trace.map((s) => s.name).join(', ')).toBeDefined();
    expect(descends(insert!, request, trace)).toBe(true);
    expect(trace.some((s) => s.spanContext().spanId === storedSpanId)).toBe(true);

    // The worker's handling: parented on the stored context at its first attempt.
    const handling = one(trace, 'process booking.created');
    expect(handling.kind).toBe(SpanKind.CONSUMER);
    expect(parentOf(handling)).toBe(storedSpanId);
    expect(handling.attributes['messaging.message.id']).toBe(messageId);
    expect(handling.attributes['stayhub.outbox.attempt']).toBe(1);

    // Its effects, each under the handling span.
    const emails = trace.filter((s) => s.name === 'send email');
    expect(emails).toHaveLength(2); // guest and host
    for (const e of emails) expect(descends(e, handling, trace)).toBe(true);
    const publish = one(trace, `publish ${STREAM.toLowerCase()}.booking.created`);
    expect(publish.kind).toBe(SpanKind.PRODUCER);
    expect(descends(publish, handling, trace)).toBe(true);

    // The consumer continued the trace from the event's headers: a child of the publish.
    const consumed = one(trace, `process ${STREAM.toLowerCase()}.booking.created`);
    expect(consumed.kind).toBe(SpanKind.CONSUMER);
    expect(parentOf(consumed)).toBe(publish.spanContext().spanId);
    expect(trace.some((s) => descends(s, consumed, trace) && /host_earnings/.test(sqlOf(s)))).toBe(true);

    // The webhook delivery: its first attempt under the fan-out handler, and the host received the context.
    const fanOut = one(trace, 'webhooks.booking-created');
    const delivery = one(trace, 'send webhook booking.created');
    expect(parentOf(delivery)).toBe(fanOut.spanContext().spanId);
    const post = one(trace, 'POST');
    expect(parentOf(post)).toBe(delivery.spanContext().spanId);
    expect(receiver.received).toHaveLength(1);
    expect(receiver.received[0]!.headers.traceparent).toBe(`00-${traceId}-${post.spanContext().spanId}-01`);
    const attempts = await t.db.db.execute<{ trace_id: string | null }>(sql`select trace_id from webhook_attempts`);
    expect(attempts.rows.map((r) => r.trace_id)).toEqual([traceId]);

    // The forced retry: its own trace, linked to the stored span, running only the handler that failed.
    expect(await drainOutboxUntilRetried()).toBe(0);
    const retry = await waitFor(
      async () => spans().find((s) => s.name === 'process booking.created' && s.attributes['stayhub.outbox.attempt'] === 2),
      10_000,
      'the retry span',
    );
    expect(retry.spanContext().traceId).not.toBe(traceId);
    expect(retry.parentSpanContext).toBeUndefined();
    expect(retry.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[traceId, storedSpanId]]);
    expect(inTrace(retry.spanContext().traceId).map((s) => s.name)).toContain('test.fails-once');
    expect(ms(retry.startTime)).toBeGreaterThan(ms(handling.endTime));

    // The claim: a span of its own, linked to the message it claimed.
    const claims = spans().filter((s) => s.name === 'receive outbox' && s.links.some((l) => l.context.spanId === storedSpanId));
    expect(claims.length).toBeGreaterThanOrEqual(2);
    for (const c of claims) expect(c.spanContext().traceId).not.toBe(traceId);
  });
});

describe.skipIf(skip)('a consumer dead letter', () => {
  it('keeps the trace context of its event, and its replay is a new trace linked to it', async () => {
    // The event the test above relayed, as the stream holds it: its headers carry the publish's context.
    const [stored] = (await readStream(nats.url, STREAM)).filter((e) => e.headers['StayHub-Topic'] === 'booking.created');
    expect(stored?.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    const [, traceId, spanId] = stored!.headers.traceparent!.split('-');
    const event = fromParts({
      subject: stored!.subject,
      headers: stored!.headers,
      data: JSON.stringify(stored!.body),
      streamSeq: stored!.seq,
      deliveries: 5,
    });
    await recordDeadLetter(t.db.db, 'dead-letter-test', event, 'Error: test');
    const [dead] = await openDeadLetters(t.db.db, 'dead-letter-test');
    expect(dead!.headers.traceparent).toBe(stored!.headers.traceparent);

    exporter.reset();
    const replayed = await replayDeadLetters(t.db.db, 'dead-letter-test', async () => undefined, captureLogger().logger);
    expect(replayed).toEqual({ applied: 1, duplicate: 0, failed: 0 });
    const replay = await waitFor(async () => spans().find((s) => s.name === `process ${stored!.subject}`), 10_000, 'the replay span');
    expect(replay.spanContext().traceId).not.toBe(traceId);
    expect(replay.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[traceId, spanId]]);
  });
});

/**
 * Drains again once the failed handler's backoff has passed, unless the first drain already ran
 * the retry (on a slow machine its backoff can pass before that drain found nothing more to do).
 */
async function drainOutboxUntilRetried(): Promise<number> {
  const state = await waitFor(async () => {
    const { rows } = await t.db.db.execute<{ status: string; due: boolean }>(
      sql`select status, available_at <= now() as due from outbox where topic = 'booking.created'`,
    );
    if (rows.length !== 1) return false;
    return rows[0]!.status === 'DONE' ? 'done' : rows[0]!.due && 'due';
  });
  if (state === 'done') return 0;
  return drainOutbox({ argv: ['--until-empty'], env: env(), extraHandlers: failsOnce, out: () => {}, err: () => {} });
}

describe('tracing off', () => {
  it('stores no context on the outbox row and writes no span', async () => {
    await telemetry?.shutdown();
    telemetry = undefined;
    exporter.reset();
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host);
    const res = await t.app.inject({
      method: 'POST',
      url: '/bookings',
      headers: guest.auth,
      payload: { propertyId: property.id, checkIn: daysFromNow(40), checkOut: daysFromNow(41), guests: 1 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const { rows } = await t.db.db.execute<{ traceparent: string | null; tracestate: string | null }>(
      sql`select traceparent, tracestate from outbox where key = ${res.json().id as string}`,
    );
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.every((r) => r.traceparent === null && r.tracestate === null)).toBe(true);
    expect(spans()).toEqual([]);
  });
});
