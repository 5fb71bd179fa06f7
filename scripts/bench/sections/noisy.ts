import type { BenchContext, BenchSection } from '../context.ts';
import { interleaved } from '../lib/stats.ts';
import { NOISY_FULL, NOISY_SMOKE, noisyNeighbour, noisyResult, renderNoisy } from '../noisy.ts';
import type { NoisyMode, NoisyRun } from '../results.ts';

/** Quiet hosts' booking emails beside one host's flood: with priorities and turns, and FIFO (noisy.ts). */
export const noisySection: BenchSection = {
  name: 'noisy',
  markdown: [{ place: 9.2, render: renderNoisy }],
  async run({ P, smoke, log, freshOurs }: BenchContext) {
    const np = smoke ? NOISY_SMOKE : NOISY_FULL;
    const mode = (m: NoisyMode) => async () => noisyNeighbour(await freshOurs(), m, np);
    const runs = await interleaved<Record<NoisyMode, NoisyRun>>(
      Math.min(P.runs, 3),
      { quiet: mode('quiet'), fair: mode('fair'), fifo: mode('fifo') },
      {
        after: (m, r) =>
          log(
            `   noisy neighbour, ${m}: booking email p50/p99 ${r.p50Ms}/${r.p99Ms} ms (${r.bookings} bookings), flood ${r.floodPerSecond}/s`,
          ),
      },
    );
    return { noisy: noisyResult(np, runs) };
  },
};
