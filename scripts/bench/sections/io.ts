import { mm, n, x } from '../lib/markdown.ts';
import { repeatOf, round } from '../lib/stats.ts';
import type { BenchContext, BenchSection } from '../context.ts';
import { oursDrain } from '../ours.ts';
import type { BenchResults, Drain } from '../results.ts';

/** Our drain when each handler waits on I/O (sleeps), at several process counts. */
export const ioSection: BenchSection = {
  name: 'io',
  markdown: [{ place: 6, render: ioMarkdown }],
  async run({ P, log, freshOurs }: BenchContext) {
    const by: Record<string, Drain[]> = {};
    for (let r = 0; r < P.runs; r++) {
      for (const processes of P.ioProcesses) {
        const d = await oursDrain(await freshOurs(), {
          topic: 'bench.sleep',
          count: P.ioMessages,
          processes,
          env: { BENCH_SLEEP_MS: String(P.ioSleepMs) },
        });
        (by[processes] ??= []).push({ perSecond: d.perSecond, drainSeconds: d.drainSeconds });
        log(`   ${processes} process(es), ${P.ioSleepMs} ms handler: ${Math.round(d.perSecond)} msg/s`);
      }
    }
    const byProcesses = Object.fromEntries(Object.entries(by).map(([k, v]) => [k, repeatOf(v)]));
    const one = byProcesses['1']!.median.perSecond;
    return {
      io: {
        byProcesses,
        scaling: Object.fromEntries(Object.entries(byProcesses).map(([k, v]) => [`x${k}`, round(v.median.perSecond / one, 3)])),
      },
    };
  },
};

function ioMarkdown(r: BenchResults): string[] {
  if (!r.io) return [];
  const p = r.params;
  const L = [`## 6. Scaling when handlers wait on I/O (${n(p.ioMessages)} messages, handler sleeps ${p.ioSleepMs} ms)`, ''];
  L.push('| Processes | Messages/s | vs 1 process |', '|---:|---:|---:|');
  for (const [k, rep] of Object.entries(r.io.byProcesses)) L.push(`| ${k} | ${mm(rep, 'perSecond')} | ${x(r.io.scaling[`x${k}`])} |`);
  L.push('');
  return L;
}
