import pg from 'pg';
import { startOtlpReceiver, type OtlpReceiver } from '../lib/otlp-receiver.ts';
import { apiBookings, startApi, type ApiFixture } from './api.ts';
import { oursDrain } from './ours.ts';
import { repeatOf, round, type Repeated } from './lib/stats.ts';
import { storeTraceContext } from './lib/outbox.ts';

/*
 * What tracing costs (docs/observability.md, docs/performance.md): the API's POST /bookings and the
 * worker's drain, each in three modes measured in the same run, runs interleaved:
 *
 *   off        no OTEL_* variable: the SDK is not loaded, no context stored
 *   sampled 0  OTEL_TRACES_EXPORTER=otlp, OTEL_TRACES_SAMPLER=parentbased_traceidratio, ARG 0: every
 *              span made and dropped at once, the context still stored and propagated
 *   exported   the same sampler at 1 (every trace), OTLP http/protobuf (the SDK's default) to a
 *              local receiver in this process (scripts/lib/otlp-receiver.ts) that counts what it
 *              is posted and answers 200
 *
 * The drain's messages carry a stored traceparent as a traced booking leaves one (sampled flag
 * 00 for "sampled 0", 01 for "exported", none for "off"): its handling continues that trace.
 */

export const TRACING_MODES = ['off', 'sampled0', 'exported'] as const;
export type TracingMode = (typeof TRACING_MODES)[number];

export function tracingEnv(mode: TracingMode, sink: OtlpReceiver): Record<string, string> {
  if (mode === 'off') return {};
  return {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: mode === 'sampled0' ? '0' : '1',
  };
}

export interface TracingResults {
  connections: number;
  api: Record<TracingMode, Repeated<{ rps: number; p99: number }>>;
  drain: Record<TracingMode, Repeated<{ perSecond: number }>>;
  /** Medians, each over off. */
  apiRatio: { sampled0: number; exported: number };
  drainRatio: { sampled0: number; exported: number };
  /** What the receiver got over the whole section (requests, MiB). */
  exported: { requests: number; mib: number };
}

export interface TracingSectionOptions {
  runs: number;
  connections: number;
  httpSeconds: number;
  drainMessages: number;
  sizes: { guests: number; properties: number };
  logDir: string;
  /** A fresh migrated database. */
  freshDatabase: (name: string) => Promise<string>;
  log: (line: string) => void;
}

/** Gives the drain's messages the trace context a traced booking stores (none when tracing is off). */
async function storeContext(url: string, mode: TracingMode): Promise<void> {
  if (mode === 'off') return;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await storeTraceContext(c, mode === 'sampled0' ? '-00' : '-01');
  } finally {
    await c.end();
  }
}

export async function tracingSection(o: TracingSectionOptions): Promise<TracingResults> {
  // Counting only: the exporters post http/protobuf, and a section's worth of spans is not kept.
  const sink = await startOtlpReceiver({ record: false });
  const apis = {} as Record<TracingMode, ApiFixture>;
  try {
    for (const mode of TRACING_MODES) {
      const url = await o.freshDatabase(`tracing_api_${mode}`);
      apis[mode] = await startApi(url, o.sizes, o.logDir, undefined, tracingEnv(mode, sink));
    }
    // Warm-up: JIT, pools, plan caches, the exporter's connection.
    for (const mode of TRACING_MODES) await apiBookings(apis[mode], o.connections, Math.min(2, o.httpSeconds));
    const api = { off: [], sampled0: [], exported: [] } as Record<TracingMode, { rps: number; p99: number }[]>;
    const drain = { off: [], sampled0: [], exported: [] } as Record<TracingMode, { perSecond: number }[]>;
    for (let r = 0; r < o.runs; r++) {
      // A different order each run: no mode always runs first (or last) on a machine that warms up.
      const order = TRACING_MODES.map((_, i) => TRACING_MODES[(i + r) % TRACING_MODES.length]!);
      for (const mode of order) {
        const a = await apiBookings(apis[mode], o.connections, o.httpSeconds);
        api[mode].push({ rps: a.rps, p99: a.p99 });
        o.log(`   API ${o.connections} conn, tracing ${mode}: ${a.rps} req/s p99 ${a.p99} ms`);
      }
      for (const mode of order) {
        const url = await o.freshDatabase(`tracing_drain_${mode}_${r}`);
        const d = await oursDrain(url, {
          topic: 'bench.noop',
          count: o.drainMessages,
          processes: 1,
          env: tracingEnv(mode, sink),
          beforeStart: () => storeContext(url, mode),
        });
        drain[mode].push({ perSecond: Math.round(d.perSecond) });
        o.log(`   drain ×1, tracing ${mode}: ${Math.round(d.perSecond)} msg/s`);
      }
    }
    const a = { off: repeatOf(api.off), sampled0: repeatOf(api.sampled0), exported: repeatOf(api.exported) };
    const d = { off: repeatOf(drain.off), sampled0: repeatOf(drain.sampled0), exported: repeatOf(drain.exported) };
    return {
      connections: o.connections,
      api: a,
      drain: d,
      apiRatio: {
        sampled0: round(a.sampled0.median.rps / a.off.median.rps, 3),
        exported: round(a.exported.median.rps / a.off.median.rps, 3),
      },
      drainRatio: {
        sampled0: round(d.sampled0.median.perSecond / d.off.median.perSecond, 3),
        exported: round(d.exported.median.perSecond / d.off.median.perSecond, 3),
      },
      exported: { requests: sink.requests(), mib: round(sink.bytes() / 2 ** 20, 1) },
    };
  } finally {
    for (const f of Object.values(apis)) await f.close();
    await sink.close();
  }
}

/** The section of bench-results.md. */
export function renderTracing(t: TracingResults): string[] {
  const mm = (r: Repeated<Record<string, number>>, k: string) => `${r.median[k]!.toLocaleString('en-US')}`;
  const runs = (r: Repeated<Record<string, number>>, k: string) => r.runs.map((v) => v[k]!.toLocaleString('en-US')).join(', ');
  return [
    '## Tracing (scripts/bench/tracing.ts)',
    '',
    `POST /bookings at ${t.connections} connections (three API processes, one per mode, runs interleaved) and the no-op drain ×1, each with tracing off, on with sampling at 0, and on with every trace exported over OTLP http/protobuf to a local receiver.`,
    '',
    '| Figure | off | sampled 0 | exported | Runs (off; sampled 0; exported) |',
    '|---|---:|---:|---:|---|',
    `| API req/s | ${mm(t.api.off, 'rps')} | ${mm(t.api.sampled0, 'rps')} | ${mm(t.api.exported, 'rps')} | ${runs(t.api.off, 'rps')}; ${runs(t.api.sampled0, 'rps')}; ${runs(t.api.exported, 'rps')} |`,
    `| API p99 (ms) | ${mm(t.api.off, 'p99')} | ${mm(t.api.sampled0, 'p99')} | ${mm(t.api.exported, 'p99')} | |`,
    `| drain msg/s | ${mm(t.drain.off, 'perSecond')} | ${mm(t.drain.sampled0, 'perSecond')} | ${mm(t.drain.exported, 'perSecond')} | ${runs(t.drain.off, 'perSecond')}; ${runs(t.drain.sampled0, 'perSecond')}; ${runs(t.drain.exported, 'perSecond')} |`,
    '',
    `Over off (medians): API sampled 0 ${t.apiRatio.sampled0}×, exported ${t.apiRatio.exported}×; drain sampled 0 ${t.drainRatio.sampled0}×, exported ${t.drainRatio.exported}×. The receiver got ${t.exported.requests.toLocaleString('en-US')} export requests, ${t.exported.mib} MiB.`,
    '',
  ];
}
