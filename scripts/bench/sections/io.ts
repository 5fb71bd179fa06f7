import { mm, n, x } from '../lib/markdown.ts';
import { measureEach, round, runsOf } from '../lib/stats.ts';
import type { BenchContext, PartOf, Drain } from '../context.ts';
import { oursDrain } from '../ours.ts';

/** Our drain when each handler waits on I/O (sleeps), at several process counts. */
export const ioSection = {
  name: 'io',
  markdown: [{ place: 6, render: ioMarkdown }],
  async run({ P, log, freshOurs }: BenchContext) {
    const drain = (processes: number) => async (): Promise<Drain> => {
      const env = { BENCH_SLEEP_MS: String(P.ioSleepMs) };
      const d = await oursDrain(await freshOurs(), { topic: 'bench.sleep', count: P.ioMessages, processes, env });
      return { perSecond: d.perSecond, drainSeconds: d.drainSeconds };
    };
    const configs = P.ioProcesses.map((p) => ({ key: String(p), label: `${p} process(es), ${P.ioSleepMs} ms handler`, measure: drain(p) }));
    const byProcesses = runsOf(await measureEach(P.runs, configs, { log, show: (d) => `${Math.round(d.perSecond)} msg/s` }));
    const one = byProcesses['1']!.median.perSecond;
    return {
      io: {
        byProcesses,
        scaling: Object.fromEntries(Object.entries(byProcesses).map(([k, v]) => [`x${k}`, round(v.median.perSecond / one, 3)])),
      },
    };
  },
};

function ioMarkdown(r: PartOf<typeof ioSection>): string[] {
  if (!r.io) return [];
  const p = r.params;
  const L = [`## 6. Scaling when handlers wait on I/O (${n(p.ioMessages)} messages, handler sleeps ${p.ioSleepMs} ms)`, ''];
  L.push('| Processes | Messages/s | vs 1 process |', '|---:|---:|---:|');
  for (const [k, rep] of Object.entries(r.io.byProcesses)) L.push(`| ${k} | ${mm(rep, 'perSecond')} | ${x(r.io.scaling[`x${k}`])} |`);
  L.push('');
  return L;
}
