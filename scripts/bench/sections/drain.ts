import { drainFloor } from '../floors.ts';
import { comparedTables, n, targetLines, x } from '../lib/markdown.ts';
import { recorder } from '../lib/recorder.ts';
import { compareConfigs, round } from '../lib/stats.ts';
import { OURS_THROUGHPUT, pgBossKey, pgBossSystem, type BenchContext, type PartOf, type Drain } from '../context.ts';
import { oursDrain } from '../ours.ts';
import { graphileDrain, graphileRunDrain } from '../peers/graphile.ts';
import { PEERS } from '../peers/guarantees.ts';
import { pgBossDrain, pgBossLabel } from '../peers/pgboss.ts';

/** A backlog committed before the clock starts, drained by ours, the floors and each peer's configurations. */
export const drainSection = {
  name: 'drain',
  markdown: [{ place: 1, render: drainMarkdown }],
  async run(ctx: BenchContext) {
    const { P, log, freshOurs } = ctx;
    const rec = recorder<Drain>(log, (d) => `${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`);
    // The floor claims as many as ours does once the backlog has grown its claims.
    const batch = Number(OURS_THROUGHPUT.WORKER_MAX_BATCH_SIZE);
    const ours = (processes: number, env: Record<string, string>) => async () =>
      oursDrain(await freshOurs(), { topic: 'bench.noop', count: P.drainMessages, processes, env });
    // Interleaved, so a slow phase of a shared machine does not land on one system only.
    for (let r = 0; r < P.runs; r++) {
      await rec.measure('ours1', 'ours', 'ours ×1', ours(1, OURS_THROUGHPUT));
      await rec.measure('ours2', 'ours', 'ours ×2', ours(2, OURS_THROUGHPUT));
      // One process at the defaults and the default log level: what a user gets without tuning.
      await rec.measure('ours1Default', 'ours', 'ours ×1, defaults, LOG_LEVEL=info', ours(1, { LOG_LEVEL: 'info' }));
      for (const lanes of [1, 2]) {
        await rec.measure(`floor${lanes}`, 'floor', `drain floor ×${lanes}`, async () =>
          drainFloor(await freshOurs(), { count: P.drainMessages, lanes, batch }),
        );
      }
      await peerDrains(ctx, rec, r);
    }
    const c = compareConfigs(rec.configs(), (d) => d.perSecond, ['ours1', 'ours2', 'ours1Default'], ['ours1', 'ours2']);
    const perSecond = (k: string) => c.configs[k]!.runs.median.perSecond;
    const drain = {
      ...c,
      floorRatios: {
        ours1: round(perSecond('ours1') / perSecond('floor1'), 3),
        ours2: round(perSecond('ours2') / perSecond('floor2'), 3),
      },
    };
    log(`   ours / drain floor: ×1 ${drain.floorRatios.ours1}, ×2 ${drain.floorRatios.ours2}`);
    return { drain };
  },
};

/** Run `r` of each peer's configurations: graphile-worker both ways, each pg-boss configuration. */
async function peerDrains({ P, freshGraphile, freshPgBoss }: BenchContext, rec: ReturnType<typeof recorder<Drain>>, r: number) {
  for (const keyed of [false, true]) {
    const [k, sys, l] = keyed ? ['Keyed', PEERS.graphile.same, ', a queue per key'] : ['', PEERS.graphile.fastest, ''];
    await rec.measure(`graphileCli${k}`, sys, `graphile-worker ${P.graphileProcesses} × --once${l}`, async () =>
      graphileDrain(await freshGraphile(), P.drainMessages, P.graphileProcesses, keyed),
    );
    await rec.measure(`graphileRun${k}`, sys, `graphile-worker run() in-process${l}`, async () =>
      graphileRunDrain(await freshGraphile(), P.drainMessages, keyed),
    );
  }
  for (const cfg of P.pgBossConfigs) {
    await rec.measure(pgBossKey(cfg), pgBossSystem(cfg), `pg-boss ${pgBossLabel(cfg)}`, async () =>
      pgBossDrain(await freshPgBoss(), P.drainMessages, r, cfg),
    );
  }
}

function drainMarkdown(r: PartOf<typeof drainSection>): string[] {
  if (!r.drain) return [];
  const d = r.drain;
  const L: string[] = [];
  L.push(`## 1. Drain throughput (${n(r.params.drainMessages)} no-op messages, committed before the clock starts)`, '');
  comparedTables(
    L,
    d,
    { rate: 'perSecond', time: 'drainSeconds', timeHead: 'Drain time (s)' },
    'Ours: `--until-empty`, batch 500 growing to 1,000 / concurrency 32, LOG_LEVEL=warn (the defaults row: 20 growing to 1,000 / 8, LOG_LEVEL=info). Drain floor ×n: our claim and DONE statements alone, bare `pg`, n lanes of one claim connection and one DONE write in flight each, batch 1,000 (scripts/bench/floors.ts).',
  );
  L.push(`Ours / drain floor (same batch, same connections): ×1 ${x(d.floorRatios.ours1)}, ×2 ${x(d.floorRatios.ours2)}.`, '');
  targetLines(L, r.targets, 'Drain');
  return L;
}
