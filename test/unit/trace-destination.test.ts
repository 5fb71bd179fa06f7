import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { describeTraceDestination, tracingRequested } from '../../src/process/telemetry.ts';

/* What `npm start` prints about traces, from the same settings the SDK reads. */
describe('where traces go', () => {
  const config = (env: Record<string, string>) => loadConfig(env);

  it('is nowhere without an exporter, or with none', () => {
    expect(tracingRequested(config({}))).toBe(false);
    expect(describeTraceDestination(config({}))).toBeUndefined();
    expect(tracingRequested(config({ OTEL_TRACES_EXPORTER: 'none' }))).toBe(false);
  });

  it('follows the specification: the base endpoint + /v1/traces, or the traces endpoint as it is', () => {
    expect(describeTraceDestination(config({ OTEL_TRACES_EXPORTER: 'otlp' }))).toBe(
      'OTLP http/protobuf to http://localhost:4318/v1/traces',
    );
    expect(
      describeTraceDestination(
        config({
          OTEL_TRACES_EXPORTER: 'otlp',
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318/',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        }),
      ),
    ).toBe('OTLP http/json to http://jaeger:4318/v1/traces');
    expect(
      describeTraceDestination(
        config({
          OTEL_TRACES_EXPORTER: 'otlp,console',
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://collector.example/otlp/traces',
          OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
        }),
      ),
    ).toBe('OTLP http/protobuf to https://collector.example/otlp/traces and the console (stdout)');
  });

  it('refuses a protocol it is not tested with, and an unknown exporter, at start', () => {
    expect(() => config({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(/OTEL_EXPORTER_OTLP_PROTOCOL/);
    expect(() => config({ OTEL_TRACES_EXPORTER: 'jaeger' })).toThrow(/OTEL_TRACES_EXPORTER/);
  });
});
