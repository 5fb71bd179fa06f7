import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { startApi } from '../api.ts';
import { repeatEach } from '../lib/stats.ts';
import type { BenchContext, BenchSection } from '../context.ts';
import { OVERLOAD_FULL, OVERLOAD_SETUP, OVERLOAD_SMOKE, overloadLoad, type OverloadResults, type OverloadRun } from '../overload.ts';

/** Half the clients booking, half searching, with and without load shedding (overload.ts). */
export const overloadSection = {
  name: 'overload',
  markdown: [{ place: 13, render: (r): string[] => (r.overload ? renderOverload(r.overload) : []) }],
  async run(ctx: BenchContext) {
    ctx.results.setup.overload = OVERLOAD_SETUP;
    return { overload: await measureOverload(ctx) };
  },
} satisfies BenchSection;

const line = (label: string, r: OverloadRun) =>
  `${label}: ${r.accepted} booked (${r.acceptedPerSecond}/s, p50 ${r.acceptedP50} ms, p99 ${r.acceptedP99} ms), 503 ${r.share503} % (bookings ${r.bookingShare503} %, search ${r.searchShare503} %), other 5xx ${r.other5xx}, lost ${r.lost}, doubled ${r.doubled}, unanswered ${r.unanswered}, no answer ${r.errors}; event-loop delay p50 ${r.eventLoopDelayP50} ms (max ${r.eventLoopDelayMax}), pool wait p50 ${r.poolWaitP50} ms (max ${r.poolWaitMax})`;

/**
 * Both APIs on databases of their own, every connection count, `runs` times each, shedding and
 * not alternating which goes first.
 */
async function measureOverload({ smoke, server, log }: BenchContext): Promise<OverloadResults> {
  const P = smoke ? OVERLOAD_SMOKE : OVERLOAD_FULL;
  const sizes = { guests: P.guests, properties: P.properties };
  const start = async (name: string, shedding: boolean) => {
    const dir = path.join(server.dir, name);
    mkdirSync(dir, { recursive: true });
    return startApi(await server.createDatabase(name, server.ourTemplate), sizes, dir, undefined, { LOAD_SHEDDING: String(shedding) });
  };
  const on = await start('overload_shedding', true);
  try {
    const off = await start('overload_without', false);
    try {
      const runs = new Map(P.connections.map((c) => [c, { shedding: [] as OverloadRun[], without: [] as OverloadRun[] }]));
      for (let r = 0; r < P.runs; r++) {
        for (const connections of P.connections) {
          for (const which of r % 2 === 0 ? (['shedding', 'without'] as const) : (['without', 'shedding'] as const)) {
            const { detail, ...run } = await overloadLoad(which === 'shedding' ? on : off, { ...P, connections });
            runs.get(connections)![which].push(run);
            log(
              `   ${connections} clients, ${which === 'shedding' ? 'shedding' : 'no shedding'}: ${line('', run).slice(2)}; 503 codes ${JSON.stringify(detail.codes503)}`,
            );
          }
        }
      }
      const byConnections = P.connections.map((c) => ({ connections: c, ...repeatEach(runs.get(c)!) }));
      const all = { shedding: [...runs.values()].flatMap((x) => x.shedding), without: [...runs.values()].flatMap((x) => x.without) };
      const sum = (runs: OverloadRun[], k: (r: OverloadRun) => number) => runs.reduce((a, r) => a + k(r), 0);
      const both = [...all.shedding, ...all.without];
      return {
        seconds: P.seconds,
        runs: P.runs,
        byConnections,
        other5xx: sum(both, (r) => r.other5xx),
        lost: sum(both, (r) => r.lost),
        doubled: sum(both, (r) => r.doubled),
        bad503: sum(all.shedding, (r) => r.noRetryAfter + r.not503Overloaded),
      };
    } finally {
      await off.close();
    }
  } finally {
    await on.close();
  }
}

/** The section of bench-results.md. */
function renderOverload(o: OverloadResults): string[] {
  const L = [
    `## Overload: half the clients booking, half searching (${o.seconds} s a run, medians of ${o.runs})`,
    '',
    '| Clients | Load shedding | Booked /s | Accepted p50 (ms) | Accepted p99 (ms) | 503 share (bookings / search) | Search 200 p99 (ms) | Other 5xx | Lost | Doubled | Event-loop delay p50 (ms) | Pool wait p50 (ms) |',
    '|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|',
  ];
  for (const c of o.byConnections) {
    for (const [label, rep] of [
      ['on', c.shedding],
      ['off', c.without],
    ] as const) {
      const m = rep.median;
      L.push(
        `| ${c.connections} | ${label} | ${m.acceptedPerSecond} | ${m.acceptedP50} | ${m.acceptedP99} | ${m.share503} % (${m.bookingShare503} / ${m.searchShare503}) | ${Number.isFinite(m.searchOkP99) ? m.searchOkP99 : 'none'} | ${m.other5xx} | ${m.lost} | ${m.doubled} | ${m.eventLoopDelayP50} | ${m.poolWaitP50} |`,
      );
    }
  }
  L.push(
    '',
    `Search 200 p99 "none": every search of those runs was refused. Over every run: other 5xx ${o.other5xx}, bookings lost ${o.lost}, doubled ${o.doubled}; 503s of the shedding API without Retry-After or not \`overloaded\`: ${o.bad503}.`,
    '',
  );
  return L;
}
