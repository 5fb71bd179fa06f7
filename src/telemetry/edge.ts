import {
  isSpanContextValid,
  ROOT_CONTEXT,
  trace,
  defaultTextMapGetter,
  type Context,
  type Link,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

/*
 * Trace context at the edge: what a caller's `traceparent`/`tracestate` may do to our traces
 * (docs/adr/0044-dependency-pins-and-trace-context-at-the-edge.md).
 *
 * A guest chooses those headers. Taken as the parent (the SDK's default propagators), they decided
 * the trace id of everything the booking caused, whether it was sampled (`-00` switched tracing
 * off for the request and its effects), and their tracestate, up to 512 characters of the guest's
 * text, was stored on the outbox row and the webhook delivery and sent on to the host's endpoint.
 *
 * So, unless OTEL_TRUST_INCOMING_TRACE says the callers are ours (a gateway of our own in front):
 * - extract takes nothing: each request is the root of a new trace, sampled by our sampler;
 * - the caller's span is kept as a link on the request's span (callerLink), without its tracestate;
 * - inject writes `traceparent` only, whatever the setting: StayHub writes no tracestate of its
 *   own, so one in a context is somebody else's, and no host receives it.
 */

const w3c = new W3CTraceContextPropagator();

/** The process's HTTP propagator (NodeSDK's textMapPropagator): W3C Trace Context, the edge's rules. */
export class EdgePropagator implements TextMapPropagator {
  constructor(private readonly trustIncoming: boolean) {}

  inject(ctx: Context, carrier: unknown, setter: TextMapSetter): void {
    const sc = trace.getSpanContext(ctx);
    if (!sc) return;
    w3c.inject(trace.setSpanContext(ctx, { ...sc, traceState: undefined }), carrier, setter);
  }

  extract(ctx: Context, carrier: unknown, getter: TextMapGetter): Context {
    return this.trustIncoming ? w3c.extract(ctx, carrier, getter) : ctx;
  }

  fields(): string[] {
    return w3c.fields();
  }
}

/**
 * The caller's span named by a request's `traceparent`, as a link for the request's span (its
 * trace id and span id, no tracestate): what lets a caller's trace find ours without steering it.
 * Undefined when the header is absent or not W3C.
 */
export function callerLink(headers: Record<string, string | string[] | undefined>): Link | undefined {
  const header = headers.traceparent;
  const traceparent = Array.isArray(header) ? header[0] : header;
  if (!traceparent) return undefined;
  const sc = trace.getSpanContext(w3c.extract(ROOT_CONTEXT, { traceparent }, defaultTextMapGetter));
  if (!sc || !isSpanContextValid(sc)) return undefined;
  return { context: { ...sc, traceState: undefined }, attributes: { 'stayhub.link': 'caller' } };
}
