import { mm } from '../lib/markdown.ts';
import type { BenchContext, BenchSection } from '../context.ts';
import { NOISY_FULL, NOISY_SMOKE, noisyNeighbour, noisyResult, renderNoisy, type NoisyMode, type NoisyRun } from '../noisy.ts';
import type { BenchResults } from '../results.ts';

/** Quiet hosts' booking emails beside one host's flood: with priorities and turns, and FIFO (noisy.ts). */
export const noisySection: BenchSection = {
  name: 'noisy',
  markdown: [{ place: 9.2, render: noisyMarkdown }],
  async run({ P, smoke, log, freshOurs }: BenchContext) {
    const np = smoke ? NOISY_SMOKE : NOISY_FULL;
    const runs: Record<NoisyMode, NoisyRun[]> = { quiet: [], fair: [], fifo: [] };
    for (let r = 0; r < Math.min(P.runs, 3); r++) {
      for (const mode of ['quiet', 'fair', 'fifo'] as const) {
        const m = await noisyNeighbour(await freshOurs(), mode, np);
        runs[mode].push(m);
        log(
          `   noisy neighbour, ${mode}: booking email p50/p99 ${m.p50Ms}/${m.p99Ms} ms (${m.bookings} bookings), flood ${m.floodPerSecond}/s`,
        );
      }
    }
    return { noisy: noisyResult(np, runs) };
  },
};

function noisyMarkdown(r: BenchResults): string[] {
  return r.noisy ? renderNoisy(r.noisy, mm) : [];
}
