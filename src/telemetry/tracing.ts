import {
  context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  isSpanContextValid,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { suppressTracing, W3CTraceContextPropagator } from '@opentelemetry/core';

/*
 * Tracing as the code sees it: spans through the OpenTelemetry API, and the trace context carried
 * across the asynchronous hops (the outbox row, the JetStream headers, the webhook delivery row).
 * The SDK that exports the spans is src/telemetry/sdk.ts, loaded only when an exporter is set.
 *
 * Off (no exporter set) every function here returns at its first line: no span, no context
 * serialised, nothing written beside an outbox row. `tracingOn()` is that one check.
 */

let on = false;
let cachedTracer: Tracer | undefined;

/** True once the SDK registered a tracer provider (src/telemetry/sdk.ts), false again after its shutdown. */
export function tracingOn(): boolean {
  return on;
}

/** Called by the SDK's start and shutdown only. */
export function setTracingOn(value: boolean): void {
  on = value;
  cachedTracer = undefined;
}

export function tracer(): Tracer {
  return (cachedTracer ??= trace.getTracer('stayhub'));
}

/** The W3C Trace Context, stored as it travels in HTTP: `traceparent` (version-traceid-spanid-flags) and `tracestate`. */
export interface StoredTraceContext {
  traceparent: string;
  tracestate: string | null;
}

/*
 * Stored context is always W3C: the outbox columns are named after it and the dashboard reads the
 * trace id out of it. HTTP's propagator is edge.ts's (no caller's context in, no tracestate out).
 */
const w3c = new W3CTraceContextPropagator();

/** The active span's context, to store beside an event written now; null when tracing is off or no span is active. */
export function activeTraceContext(): StoredTraceContext | null {
  if (!on) return null;
  const carrier: Record<string, string> = {};
  w3c.inject(context.active(), carrier, defaultTextMapSetter);
  if (!carrier.traceparent) return null;
  return { traceparent: carrier.traceparent, tracestate: carrier.tracestate ?? null };
}

/** The remote span context a stored `traceparent` names, or undefined when there is none or it does not parse. */
export function storedSpanContext(traceparent: string | null | undefined, tracestate?: string | null): SpanContext | undefined {
  if (!traceparent) return undefined;
  const carrier: Record<string, string> = { traceparent };
  if (tracestate) carrier.tracestate = tracestate;
  const sc = trace.getSpanContext(w3c.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter));
  return sc && isSpanContextValid(sc) ? sc : undefined;
}

/** The trace id in a stored `traceparent` (what a person pastes into the tracing backend), or null. */
export function traceIdOf(traceparent: string | null | undefined): string | null {
  const m = traceparent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceparent) : null;
  return m ? m[1]! : null;
}

/**
 * Where a unit of asynchronous work (an outbox message's handling, a consumed event, a webhook
 * attempt) hangs in the traces, given the context stored when it was produced:
 * - its first try continues the producer's trace, as a child of the stored span;
 * - a later try starts a new trace of its own, with a link to the stored span. A retry may run
 *   hours later (the backoff reaches BACKOFF_MAX_SECONDS, a webhook's schedule 10 hours): as a
 *   child it would stretch the request's trace over those hours and bury the request in it.
 *   docs/adr/0031-retries-start-a-linked-trace.md says why, and who chose the same.
 * Nothing stored (tracing was off when it was produced): a new trace, unlinked.
 */
export function placeAfterHop(
  stored: { traceparent: string | null; tracestate?: string | null },
  firstTry: boolean,
): { parent: Context; links: Link[] } {
  const sc = storedSpanContext(stored.traceparent, stored.tracestate);
  if (!sc) return { parent: ROOT_CONTEXT, links: [] };
  if (firstTry) return { parent: trace.setSpanContext(ROOT_CONTEXT, sc), links: [] };
  return { parent: ROOT_CONTEXT, links: [{ context: sc, attributes: { 'stayhub.link': 'retry of' } }] };
}

export interface SpanSpec {
  kind?: SpanKind;
  attributes?: Attributes;
  links?: Link[];
  /** The parent; the active context when absent. */
  parent?: Context;
  startTime?: number;
}

/**
 * Runs `fn` inside a new span (the active one while it runs) and ends it: an error is recorded on
 * the span and thrown on. Tracing off: `fn` runs as it is, given no span.
 */
export function inSpan<T>(name: string, spec: SpanSpec, fn: (span: Span | undefined) => Promise<T>): Promise<T> {
  if (!on) return fn(undefined);
  const parent = spec.parent ?? context.active();
  const span = tracer().startSpan(
    name,
    { kind: spec.kind ?? SpanKind.INTERNAL, attributes: spec.attributes, links: spec.links, startTime: spec.startTime },
    parent,
  );
  return context.with(trace.setSpan(parent, span), async () => {
    try {
      return await fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Marks the active span failed, for an outcome that is no exception (a webhook answered 500). */
export function markActiveSpanFailed(message: string): void {
  if (!on) return;
  trace.getSpan(context.active())?.setStatus({ code: SpanStatusCode.ERROR, message: message.slice(0, 500) });
}

/** Marks a span failed with the error (ended by its owner). */
export function failSpan(span: Span, err: unknown): void {
  const e = err instanceof Error ? err : new Error(String(err));
  span.recordException(e);
  span.setStatus({ code: SpanStatusCode.ERROR, message: e.message.slice(0, 500) });
}

/** The W3C headers of the active span, written into `carrier` with `set` (NATS headers, a webhook request). */
export function injectTraceContext<C>(carrier: C, set: (carrier: C, key: string, value: string) => void): void {
  if (!on) return;
  w3c.inject(context.active(), carrier, { set });
}

/**
 * Runs `fn` with tracing suppressed: no span is recorded below it and no instrumentation injects a
 * `traceparent` (a webhook to a host's endpoint when WEBHOOK_TRACE_CONTEXT is off).
 */
export function withoutPropagation<T>(fn: () => T): T {
  if (!on) return fn();
  return context.with(suppressTracing(context.active()), fn);
}

/** The active span's trace id, to keep beside a record of what it did (a webhook attempt); null when tracing is off. */
export function activeTraceId(): string | null {
  if (!on) return null;
  const sc = trace.getSpan(context.active())?.spanContext();
  return sc && isSpanContextValid(sc) ? sc.traceId : null;
}

/**
 * pino's mixin (src/logger.ts): the active span's ids on every log line written inside one, named
 * as OpenTelemetry's log data model names them, so a line leads to its trace and back. A new object
 * every time, even empty: pino merges the line's own fields into what the mixin returns.
 */
export function traceLogFields(): { trace_id?: string; span_id?: string } {
  if (!on) return {};
  const sc = trace.getSpan(context.active())?.spanContext();
  if (!sc || !isSpanContextValid(sc)) return {};
  return { trace_id: sc.traceId, span_id: sc.spanId };
}

export { SpanKind, SpanStatusCode };

/**
 * Attribute names of the OpenTelemetry messaging semantic conventions (incubating, so copied here
 * rather than imported, as the conventions advise).
 */
export const MESSAGING = {
  system: 'messaging.system',
  operationType: 'messaging.operation.type',
  operationName: 'messaging.operation.name',
  destination: 'messaging.destination.name',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  consumerGroup: 'messaging.consumer.group.name',
  deliveryCount: 'messaging.nats.message.delivery_count',
  conversationId: 'messaging.message.conversation_id',
} as const;
