import { addPending } from '../history.ts';
import { mm, n } from '../lib/markdown.ts';
import { median, repeatOf } from '../lib/stats.ts';
import type { BenchContext, PartOf, Drain } from '../context.ts';
import { claimTimes } from '../ours.ts';
import { drainOurs } from './purge.ts';

/** Our drain (throughput settings) and claim on outboxes holding a DONE history of each size. */
export const growthSection = {
  name: 'growth',
  markdown: [{ place: 11, render: growthMarkdown }],
  async run({ P, log, history: clones }: BenchContext) {
    const drains: Record<number, Record<number, Drain[]>> = {};
    const claims: Record<number, { ms: number }[]> = {};
    for (let r = 0; r < P.historyRuns; r++) {
      for (const history of P.growthHistories) {
        const ms = await clones.on(history, async (url) => {
          await addPending(url, P.claimPending);
          return median(await claimTimes(url, P.claimSamples, P.claimBatch));
        });
        (claims[history] ??= []).push({ ms });
        const line = [];
        for (const processes of P.growthProcesses) {
          const d = await clones.on(history, (url) => drainOurs(url, P.growthMessages, processes));
          ((drains[history] ??= {})[processes] ??= []).push(d);
          line.push(`×${processes} ${Math.round(d.perSecond)}`);
        }
        log(`   ${history.toLocaleString('en-US')} DONE: drain msg/s ${line.join(', ')}; claim ${ms.toFixed(3)} ms`);
      }
    }
    return {
      growth: {
        messages: P.growthMessages,
        byHistory: P.growthHistories.map((history) => ({
          history,
          byProcesses: Object.fromEntries(Object.entries(drains[history]!).map(([k, v]) => [k, repeatOf(v)])),
          claimMs: repeatOf(claims[history]!),
        })),
      },
    };
  },
};

function growthMarkdown(r: PartOf<typeof growthSection>): string[] {
  if (!r.growth) return [];
  const g = r.growth;
  const p = r.params;
  const procs = Object.keys(g.byHistory[0]?.byProcesses ?? {});
  const L = [
    `## 11. Where the cost grows (drain of ${n(g.messages)} no-op messages, our throughput settings, on a DONE history; ${p.historyRuns} run(s))`,
    '',
    `| DONE history | ${procs.map((k) => `×${k} (msg/s)`).join(' | ')} | claim of ${p.claimBatch} (ms) |`,
    `|---:|${procs.map(() => '---:').join('|')}|---:|`,
  ];
  for (const h of g.byHistory) {
    L.push(`| ${n(h.history)} | ${procs.map((k) => mm(h.byProcesses[k]!, 'perSecond')).join(' | ')} | ${mm(h.claimMs, 'ms', 3)} |`);
  }
  L.push('', `Claim: the median of ${n(p.claimSamples)} claims on ${n(p.claimPending)} PENDING rows after the history, rolled back.`, '');
  return L;
}
