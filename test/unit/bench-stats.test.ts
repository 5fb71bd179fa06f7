import { describe, expect, it } from 'vitest';
import { ratiosOf, repeatOf } from '../../scripts/bench/lib/stats.ts';
import { evaluateTargets } from '../../scripts/bench/targets.ts';

/*
 * The bench's arithmetic: every median comes with its spread, and every configuration of ours is
 * compared with every peer (the best of ours is a labelled row, not the only one).
 */

describe('bench statistics', () => {
  it('reports median, min and max of each field over the runs', () => {
    const r = repeatOf([{ perSecond: 300 }, { perSecond: 100 }, { perSecond: 200 }, { perSecond: 500 }, { perSecond: 400 }]);
    expect(r.median.perSecond).toBe(300);
    expect(r.min.perSecond).toBe(100);
    expect(r.max.perSecond).toBe(500);
    expect(r.runs).toHaveLength(5);
  });

  it('gives each configuration its own ratio to each peer, and labels the best of ours', () => {
    const ratios = ratiosOf({ ours1: 2_000, ours2: 3_000 }, { graphile: 10_000, pgBoss: 6_000 });
    expect(ratios.ours1).toEqual({ graphile: 0.2, pgBoss: 0.333, bestPeer: 0.2 });
    expect(ratios.ours2).toEqual({ graphile: 0.3, pgBoss: 0.5, bestPeer: 0.3 });
    expect(ratios.bestOfOurs).toEqual(ratios.ours2);
  });

  it('judges the drain targets on the labelled best-of-ours row, burst included', () => {
    const ratios = ratiosOf({ ours1: 2_000, ours2: 12_000 }, { graphile: 10_000 });
    const targets = evaluateTargets({ drain: { ratios }, burst: { ratios: ratiosOf({ ours1: 1, ours2: 1 }, { pgBoss: 2 }) } } as never);
    expect(targets.find((t) => t.name.startsWith('Drain (backlog'))).toMatchObject({ met: true, value: '1.2×' });
    expect(targets.find((t) => t.name.startsWith('Drain (idle workers'))).toMatchObject({ met: false, value: '0.5×' });
  });
});
