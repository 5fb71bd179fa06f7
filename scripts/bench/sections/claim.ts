import { n, x } from '../lib/markdown.ts';
import { median, repeat } from '../lib/stats.ts';
import type { BenchContext, PartOf } from '../context.ts';
import { claimTimes, explainClaim, prepareClaimTables } from '../ours.ts';

/** Our claim on an outbox without history and on one holding a DONE history. */
export const claimSection = {
  name: 'claim',
  markdown: [{ place: 5, render: claimMarkdown }],
  async run({ P, log, freshOurs }: BenchContext) {
    const emptyUrl = await freshOurs();
    const historyUrl = await freshOurs();
    log(`   filling: ${P.claimPending} PENDING each, ${P.claimDone} DONE in the second`);
    await prepareClaimTables(emptyUrl, historyUrl, P.claimPending, P.claimDone);
    const runs = await repeat(P.runs, async () => {
      // The median claim of each: one claim's typical cost.
      const emptyMs = median(await claimTimes(emptyUrl, P.claimSamples, P.claimBatch));
      const withHistoryMs = median(await claimTimes(historyUrl, P.claimSamples, P.claimBatch));
      log(`   claim: ${emptyMs.toFixed(3)} ms empty, ${withHistoryMs.toFixed(3)} ms with history`);
      return { emptyMs, withHistoryMs, ratio: withHistoryMs / emptyMs };
    });
    return { claim: { runs, explain: await explainClaim(historyUrl, P.claimBatch) } };
  },
};

function claimMarkdown(r: PartOf<typeof claimSection>): string[] {
  if (!r.claim) return [];
  const p = r.params;
  const c = r.claim.runs.median;
  return [
    `## 5. Claim cost against history (one claim of ${p.claimBatch}; ${n(p.claimPending)} PENDING)`,
    '',
    `| 0 DONE rows (ms) | ${n(p.claimDone)} DONE rows (ms) | ratio |`,
    '|---:|---:|---:|',
    `| ${n(c.emptyMs, 3)} | ${n(c.withHistoryMs, 3)} | ${x(c.ratio)} |`,
    '',
    'The claim as the worker sends it, explained on the table with history:',
    '',
    '```',
    r.claim.explain,
    '```',
    '',
  ];
}
