import { latencyFloor } from '../floors.ts';
import { mm, targetLines, x } from '../lib/markdown.ts';
import { measureEach, round, runsOf } from '../lib/stats.ts';
import type { BenchContext, PartOf } from '../context.ts';
import { oursLatency } from '../ours.ts';
import { graphileLatency } from '../peers/graphile.ts';
import { PEERS } from '../peers/guarantees.ts';
import { pgBossLatency } from '../peers/pgboss.ts';

type Lat = Awaited<ReturnType<typeof oursLatency>>;

/** Commit → handler on an idle worker of each system, and the bare LISTEN/NOTIFY round trip. */
export const latencySection = {
  name: 'latency',
  markdown: [{ place: 2, render: latencyMarkdown }],
  async run({ P, log, freshOurs, freshGraphile, freshPgBoss }: BenchContext) {
    const graphile = (keyed: boolean) => async () => graphileLatency(await freshGraphile(), P.latencySamples, keyed);
    const pgBoss = (keyed: boolean) => async () => pgBossLatency(await freshPgBoss(), P.pgBossLatencySamples, keyed);
    const configs = [
      { key: 'ours', label: 'ours', measure: async () => oursLatency(await freshOurs(), P.latencySamples) },
      {
        key: 'floor',
        label: 'floor (bare LISTEN/NOTIFY round trip)',
        measure: async () => latencyFloor(await freshOurs(), P.latencyFloorSamples),
      },
      { key: 'graphile', label: 'graphile-worker', measure: graphile(false) },
      { key: 'pgBoss', label: 'pg-boss', measure: pgBoss(false) },
      { key: 'graphileKeyed', label: 'graphile-worker, a queue per key', measure: graphile(true) },
      { key: 'pgBossKeyed', label: 'pg-boss, key_strict_fifo per key', measure: pgBoss(true) },
    ] as const;
    const show = (l: Lat) => `p50 ${l.p50} ms, p99 ${l.p99} ms, max ${l.max} ms`;
    const m = runsOf(await measureEach(P.runs, configs, { log, show }));
    const ratio = (k: 'p50' | 'p99') => round(m.ours.median[k] / m.floor.median[k], 3);
    const floorRatios = { p50: ratio('p50'), p99: ratio('p99') };
    return { latency: { ...m, floorRatios } };
  },
};

function latencyMarkdown(r: PartOf<typeof latencySection>): string[] {
  if (!r.latency) return [];
  const l = r.latency;
  const p = r.params;
  const L: string[] = [];
  L.push(`## 2. Commit → handler latency (idle worker; ${p.latencySamples} samples per run, pg-boss ${p.pgBossLatencySamples})`, '');
  L.push('| System | p50 (ms) | p99 (ms) | max (ms) | mean (ms) |', '|---|---:|---:|---:|---:|');
  const row = (name: string, rep: typeof l.ours) =>
    L.push(`| ${name} | ${mm(rep, 'p50', 2)} | ${mm(rep, 'p99', 2)} | ${mm(rep, 'max', 2)} | ${mm(rep, 'mean', 2)} |`);
  row('ours (LISTEN/NOTIFY)', l.ours);
  row('graphile-worker (LISTEN/NOTIFY)', l.graphile);
  row('pg-boss (LISTEN/NOTIFY, polling every 0.5 s behind it)', l.pgBoss);
  if (l.graphileKeyed) row(`${PEERS.graphile.same}: a queue per key`, l.graphileKeyed);
  if (l.pgBossKeyed) row(`${PEERS.pgBoss.same}: key_strict_fifo, a key per job`, l.pgBossKeyed);
  row(`latency floor: a bare LISTEN/NOTIFY round trip (${p.latencyFloorSamples} samples)`, l.floor);
  L.push(
    '',
    (l.graphileKeyed
      ? `Ours / ${PEERS.graphile.same} (the target's peer): p50 ${x(l.ours.median.p50 / l.graphileKeyed.median.p50)}, p99 ${x(l.ours.median.p99 / l.graphileKeyed.median.p99)}. `
      : '') +
      `Ours / graphile-worker, fastest: p50 ${x(l.ours.median.p50 / l.graphile.median.p50)}, p99 ${x(l.ours.median.p99 / l.graphile.median.p99)}. ` +
      `Ours / latency floor: p50 ${x(l.floorRatios.p50)}, p99 ${x(l.floorRatios.p99)} (reported, no target).`,
    '',
  );
  targetLines(L, r.targets, 'Latency');
  return L;
}
