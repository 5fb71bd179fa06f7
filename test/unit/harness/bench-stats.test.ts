import { describe, expect, it } from 'vitest';
import { compareConfigs, ratiosOf, repeatOf, strongestOf } from '../../../scripts/bench/lib/stats.ts';
import { evaluateTargets } from '../../../scripts/bench/targets.ts';

/*
 * The bench's arithmetic: every median comes with its spread, each peer is compared at its
 * strongest configuration, and every configuration of ours is compared with every peer (the best
 * of ours is a labelled row, not the only one).
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

  it("picks each peer's strongest configuration, whichever way it was run", () => {
    const best = strongestOf({
      graphileCli: { system: 'graphile-worker', value: 30_000 },
      graphileRun: { system: 'graphile-worker', value: 38_000 },
      pgBoss5000x1: { system: 'pg-boss', value: 10_000 },
      pgBoss5000x4: { system: 'pg-boss', value: 14_000 },
    });
    expect(best).toEqual({ 'graphile-worker': 'graphileRun', 'pg-boss': 'pgBoss5000x4' });
  });

  it("compares every configuration of ours with each peer's strongest, never with a floor", () => {
    const m = (system: string, perSecond: number) => ({ system, label: system, runs: repeatOf([{ perSecond }]) });
    const c = compareConfigs(
      {
        ours1: m('ours', 30_000),
        ours1Cold: m('ours', 24_000),
        floor1: m('floor', 60_000),
        graphileCli1: m('graphile-worker', 20_000),
        graphileRunCold: m('graphile-worker', 40_000),
        pgBoss5000x1: m('pg-boss', 10_000),
      },
      (t) => t.perSecond,
      ['ours1', 'ours1Cold'],
      ['ours1'],
    );
    expect(c.strongest).toEqual({ 'graphile-worker': 'graphileRunCold', 'pg-boss': 'pgBoss5000x1' });
    expect(c.ratios.ours1).toEqual({ 'graphile-worker': 0.75, 'pg-boss': 3, bestPeer: 0.75 });
    expect(c.ratios.ours1Cold).toEqual({ 'graphile-worker': 0.6, 'pg-boss': 2.4, bestPeer: 0.6 });
    expect(c.ratios.bestOfOurs).toEqual(c.ratios.ours1);
  });

  it("judges throughput per process count of ours against each peer's same-guarantee configuration, at 1.2", () => {
    const same = { 'graphile-worker, same guarantees': 1_000, 'pg-boss, same guarantees': 10_000 };
    // The fastest configurations are compared too, but set no target.
    const drain = ratiosOf({ ours1: 12_000, ours2: 11_000 }, { 'graphile-worker': 20_000, 'pg-boss': 60_000, ...same });
    const burst = ratiosOf({ ours1: 30_000, ours2: 45_000 }, { 'graphile-worker': 90_000, ...same, 'pg-boss, same guarantees': 36_000 });
    const targets = evaluateTargets({
      drain: { ratios: drain, floorRatios: { ours1: 0.85, ours2: 0.8 } },
      burst: { ratios: burst },
    } as never);
    const t = (name: string) => targets.find((x) => x.name === name);
    expect(t('Drain (backlog): ours ×1 / pg-boss, same guarantees')).toMatchObject({ met: true, value: '1.2×', target: '≥ 1.2' });
    expect(t('Drain (backlog): ours ×2 / pg-boss, same guarantees')).toMatchObject({ met: false, value: '1.1×' });
    expect(t('Drain (backlog): ours ×1 / graphile-worker, same guarantees')).toMatchObject({ met: true, value: '12×' });
    expect(t('Burst (idle workers): ours ×1 / pg-boss, same guarantees')).toMatchObject({ met: false, value: '0.833×' });
    expect(t('Burst (idle workers): ours ×2 / pg-boss, same guarantees')).toMatchObject({ met: true, value: '1.25×' });
    expect(targets.filter((x) => x.name.includes('/ pg-boss') && !x.name.includes('same guarantees'))).toEqual([]);
    // The floor: one process at 0.9, two at 0.8.
    expect(t('Drain: ours ×1 / drain floor ×1')).toMatchObject({ met: false, value: '0.85×', target: '≥ 0.9' });
    expect(t('Drain: ours ×2 / drain floor ×2')).toMatchObject({ met: true, value: '0.8×', target: '≥ 0.8' });
    // A section not run is "not measured", never met.
    expect(t('Relay into JetStream / relay floor (msg/s)')).toMatchObject({ met: null, value: 'not measured', target: '≥ 0.8' });
    expect(t('API / pgbench -M prepared at 8 connections')).toMatchObject({ met: null, target: '≥ 0.6' });
  });

  it('judges latency against 0.8× graphile-worker with a queue per key, not its fastest', () => {
    const lat = (p50: number, p99: number) => ({ median: { p50, p99 } });
    const targets = evaluateTargets({
      latency: { ours: lat(1.6, 4), graphile: lat(1, 1), graphileKeyed: lat(2, 4.8) },
    } as never);
    expect(targets.find((x) => x.name === 'Latency p50: ours / graphile-worker, same guarantees')).toMatchObject({
      met: true,
      value: '0.8×',
    });
    expect(targets.find((x) => x.name === 'Latency p99: ours / graphile-worker, same guarantees')).toMatchObject({
      met: false,
      value: '0.833×',
    });
  });
});
