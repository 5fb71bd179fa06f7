import type { Config } from '../config.ts';

/*
 * Tracing for a process run by runMain: started before the command runs (so the API's Fastify, its
 * pool and the worker's handlers are traced from their first request or message), flushed after
 * it returns. Off unless OTEL_TRACES_EXPORTER names an exporter: then the SDK is not even loaded.
 */

export interface ProcessTelemetry {
  /** Exports what is still buffered (at most FLUSH_MS), then unregisters. */
  shutdown(): Promise<void>;
}

/** How long a stopping process waits for its last spans to be exported: a collector that is away must not hold it. */
const FLUSH_MS = 2_000;

type TraceSettings = Pick<
  Config,
  | 'OTEL_TRACES_EXPORTER'
  | 'OTEL_EXPORTER_OTLP_ENDPOINT'
  | 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'
  | 'OTEL_EXPORTER_OTLP_PROTOCOL'
  | 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
  | 'OTEL_TRUST_INCOMING_TRACE'
>;

/** True when an exporter is set (and it is not `none`). */
export function tracingRequested(config: Pick<Config, 'OTEL_TRACES_EXPORTER'>): boolean {
  const exporters = config.OTEL_TRACES_EXPORTER?.split(',') ?? [];
  return exporters.length > 0 && exporters[0] !== 'none';
}

/** Where the spans go, in words (`npm start` prints it): "OTLP http/protobuf to http://…/v1/traces". */
export function describeTraceDestination(config: TraceSettings): string | undefined {
  if (!tracingRequested(config)) return undefined;
  const parts: string[] = [];
  for (const exporter of new Set(config.OTEL_TRACES_EXPORTER!.split(','))) {
    if (exporter === 'console') parts.push('the console (stdout)');
    if (exporter !== 'otlp') continue;
    const protocol = config.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? config.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf';
    // The specification's rule: the signal's own endpoint as it is, else the base one + /v1/traces.
    const base = (config.OTEL_EXPORTER_OTLP_ENDPOINT ?? 'http://localhost:4318').replace(/\/$/, '');
    parts.push(`OTLP ${protocol} to ${config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? `${base}/v1/traces`}`);
  }
  return parts.join(' and ');
}

/** Starts the SDK when tracing is requested; undefined otherwise. `name` makes the service name: stayhub-<name>. */
export async function startProcessTelemetry(config: TraceSettings, name: string): Promise<ProcessTelemetry | undefined> {
  if (!tracingRequested(config)) return undefined;
  const { startTelemetry } = await import('../telemetry/sdk.ts');
  const telemetry = startTelemetry({
    serviceName: `stayhub-${name.replace(/[^A-Za-z0-9-]+/g, '-')}`,
    trustIncomingTrace: config.OTEL_TRUST_INCOMING_TRACE,
  });
  return {
    async shutdown() {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((r) => (timer = setTimeout(r, FLUSH_MS)));
      await Promise.race([telemetry.shutdown().catch(() => undefined), late]);
      clearTimeout(timer);
    },
  };
}
