import http from 'node:http';
import https from 'node:https';
import { context, propagation, trace } from '@opentelemetry/api';
import { FastifyOtelInstrumentation } from '@fastify/otel';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { Sampler, SpanProcessor } from '@opentelemetry/sdk-trace';
import pg from 'pg';
import { callerLink, EdgePropagator } from './edge.ts';
import { setTracingOn } from './tracing.ts';

/*
 * The OpenTelemetry Node SDK, configured the standard way: OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*
 * (http/json or http/protobuf), OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_* are read
 * by the SDK itself. Traces only: metrics stay Prometheus' (/metrics) and logs pino's, which carry
 * the trace ids (src/telemetry/tracing.ts, traceLogFields).
 *
 * Imported only when an exporter is set (src/process/telemetry.ts): a process without one never
 * loads the SDK.
 *
 * Instrumentations, each the maintained one:
 * - Fastify: @fastify/otel, registered on every Fastify instance made after the start (its
 *   registerOnInitialization), a SERVER span per request named after its route.
 * - node-postgres: @opentelemetry/instrumentation-pg, a span per query, only under a span
 *   (requireParentSpan): the worker's polls, leases and DONE batches run outside any and make none.
 * - outbound HTTP: @opentelemetry/instrumentation-http, client spans only (Fastify's span serves
 *   the requests we answer), with `traceparent` in the request: the webhook sender's POSTs.
 *
 * Trace context from outside (edge.ts): a request is the root of a new trace, the caller's span a
 * link on it, unless `trustIncomingTrace`; no tracestate goes out. OTEL_PROPAGATORS is not read:
 * the propagator is part of that rule.
 *
 * Their require hook patches a module as it is first loaded, and an entry point (ESM, its imports
 * hoisted) has loaded pg and http before its runMain starts the SDK. So the modules already loaded
 * are handed to each instrumentation's own patch functions (getModuleDefinitions: what the hook
 * would have run); each patch replaces an earlier one of its own, so a later require patches nothing twice.
 */

export interface TelemetryOptions {
  /** service.name, unless OTEL_SERVICE_NAME is set. */
  serviceName: string;
  /** Tests: where spans go instead of OTEL_TRACES_EXPORTER's exporter (an in-memory one). */
  spanProcessors?: SpanProcessor[];
  sampler?: Sampler;
  /** OTEL_TRUST_INCOMING_TRACE: a request's `traceparent`/`tracestate` become its parent (and decide its sampling). */
  trustIncomingTrace?: boolean;
}

export interface Telemetry {
  /** Exports what is buffered and unregisters the SDK: a later start may register another. */
  shutdown(): Promise<void>;
}

/** Routes that answer probes and scrapes: a span each would drown the traces worth reading. */
const UNTRACED_ROUTES = new Set(['/health', '/metrics']);

export function startTelemetry(opts: TelemetryOptions): Telemetry {
  const trustIncoming = opts.trustIncomingTrace ?? false;
  const instrumentations = [
    new FastifyOtelInstrumentation({
      registerOnInitialization: true,
      // A span per request and per route handler; one per hook (helmet, CORS, auth…) would triple them.
      instrumentHooks: false,
      ignorePaths: (route) => UNTRACED_ROUTES.has(route.url),
      requestHook: (span, request) => {
        span.updateName(`${request.method} ${request.routeOptions.url ?? 'unknown route'}`);
        const caller = trustIncoming ? undefined : callerLink(request.headers);
        if (caller) span.addLink(caller);
      },
    }),
    new PgInstrumentation({ requireParentSpan: true }),
    new HttpInstrumentation({ disableIncomingRequestInstrumentation: true }),
  ];
  const sdk = new NodeSDK({
    serviceName: process.env.OTEL_SERVICE_NAME ? undefined : opts.serviceName,
    instrumentations,
    spanProcessors: opts.spanProcessors,
    sampler: opts.sampler,
    textMapPropagator: new EdgePropagator(trustIncoming),
    // Not the SDK's: Prometheus serves the metrics and pino writes the logs (their default would be OTLP).
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  patchLoadedModules(instrumentations);
  setTracingOn(true);
  return {
    async shutdown() {
      setTracingOn(false);
      for (const i of instrumentations) i.disable();
      await sdk.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}

/** The modules our code imported, by the name an instrumentation's definition patches. */
function loadedModules(): Record<string, unknown> {
  // pg.Pool extends pg-pool's Pool, whose prototype the pg-pool patch wraps (it keeps a waiting
  // query in its caller's context: without it, the query runs in the context of whichever request
  // released the connection).
  return { http, https, pg, 'pg-pool': Object.getPrototypeOf(pg.Pool) as unknown };
}

function patchLoadedModules(instrumentations: { getModuleDefinitions(): { name: string; patch?: (m: any) => unknown }[] }[]): void {
  const loaded = loadedModules();
  for (const i of instrumentations) {
    for (const def of i.getModuleDefinitions()) {
      const m = loaded[def.name];
      if (m !== undefined) def.patch?.(m);
    }
  }
}
