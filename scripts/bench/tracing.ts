import { startOtlpReceiver, type OtlpReceiver } from '../lib/otlp-receiver.ts';
import { withClient } from '../lib/postgres.ts';
import { apiBookings, startApi, type ApiFixture } from './api.ts';
import { PREPARED_CONNECTIONS, type BenchContext, type PartOf } from './context.ts';
import { oursDrain } from './ours.ts';
import { repeatEach, round, type Repeated } from './lib/stats.ts';
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

/** What tracing costs the API and the drain: off, sampled at 0, every trace exported. */
export const tracingSection = {
  name: 'tracing',
  markdown: [{ place: 9.1, render: renderTracing }],
  run: async (ctx: BenchContext) => ({ tracing: await measureTracing(ctx) }),
};

const TRACING_MODES = ['off', 'sampled0', 'exported'] as const;
type TracingMode = (typeof TRACING_MODES)[number];

function tracingEnv(mode: TracingMode, sink: OtlpReceiver): Record<string, string> {
  if (mode === 'off') return {};
  return {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: mode === 'sampled0' ? '0' : '1',
  };
}

/** Gives the drain's messages the trace context a traced booking stores (none when tracing is off). */
async function storeContext(url: string, mode: TracingMode): Promise<void> {
  if (mode !== 'off') await withClient(url, (c) => storeTraceContext(c, mode === 'sampled0' ? '-00' : '-01'));
}

/** POST /bookings at PREPARED_CONNECTIONS and the no-op drain ×1, each in every mode, runs interleaved. */
async function measureTracing({ P, server, log }: BenchContext) {
  const connections = PREPARED_CONNECTIONS;
  const freshDatabase = (name: string) => server.createDatabase(name, server.ourTemplate);
  // Counting only: the exporters post http/protobuf, and a section's worth of spans is not kept.
  const sink = await startOtlpReceiver({ record: false });
  const apis = {} as Record<TracingMode, ApiFixture>;
  try {
    for (const mode of TRACING_MODES) {
      const sizes = { guests: P.apiGuests, properties: P.apiProperties };
      apis[mode] = await startApi(await freshDatabase(`tracing_api_${mode}`), sizes, server.dir, undefined, tracingEnv(mode, sink));
    }
    // Warm-up: JIT, pools, plan caches, the exporter's connection.
    for (const mode of TRACING_MODES) await apiBookings(apis[mode], connections, Math.min(2, P.httpSeconds));
    const api = { off: [], sampled0: [], exported: [] } as Record<TracingMode, { rps: number; p99: number }[]>;
    const drain = { off: [], sampled0: [], exported: [] } as Record<TracingMode, { perSecond: number }[]>;
    for (let r = 0; r < P.runs; r++) {
      // A different order each run: no mode always runs first (or last) on a machine that warms up.
      const order = TRACING_MODES.map((_, i) => TRACING_MODES[(i + r) % TRACING_MODES.length]!);
      for (const mode of order) {
        const a = await apiBookings(apis[mode], connections, P.httpSeconds);
        api[mode].push({ rps: a.rps, p99: a.p99 });
        log(`   API ${connections} conn, tracing ${mode}: ${a.rps} req/s p99 ${a.p99} ms`);
      }
      for (const mode of order) {
        const url = await freshDatabase(`tracing_drain_${mode}_${r}`);
        const env = tracingEnv(mode, sink);
        const d = await oursDrain(url, {
          topic: 'bench.noop',
          count: P.drainMessages,
          processes: 1,
          env,
          beforeStart: () => storeContext(url, mode),
        });
        drain[mode].push({ perSecond: Math.round(d.perSecond) });
        log(`   drain ×1, tracing ${mode}: ${Math.round(d.perSecond)} msg/s`);
      }
    }
    const a = repeatEach(api);
    const d = repeatEach(drain);
    const overOff = <T extends Record<string, number>>(m: Record<TracingMode, Repeated<T>>, k: keyof T) => ({
      sampled0: round(m.sampled0.median[k]! / m.off.median[k]!, 3),
      exported: round(m.exported.median[k]! / m.off.median[k]!, 3),
    });
    return {
      connections,
      api: a,
      drain: d,
      // Medians, each over off.
      apiRatio: overOff(a, 'rps'),
      drainRatio: overOff(d, 'perSecond'),
      // What the receiver got over the whole section (requests, MiB).
      exported: { requests: sink.requests(), mib: round(sink.bytes() / 2 ** 20, 1) },
    };
  } finally {
    for (const f of Object.values(apis)) await f.close();
    await sink.close();
  }
}

/** The section of bench-results.md. */
function renderTracing(r: PartOf<typeof tracingSection>): string[] {
  const t = r.tracing;
  if (!t) return [];
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
