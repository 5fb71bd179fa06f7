import { drainFloor } from '../floors.ts';
import { comparedTables, n, targetLines, x } from '../lib/markdown.ts';
import { compareConfigs, measureEach, round, type Config } from '../lib/stats.ts';
import { OURS_THROUGHPUT, pgBossConfig, type BenchContext, type PartOf, type Drain } from '../context.ts';
import { oursDrain } from '../ours.ts';
import { graphileConfig, graphileDrain, graphileRunDrain } from '../peers/graphile.ts';
import type { PgBossConfig } from '../params.ts';
import { pgBossDrain } from '../peers/pgboss.ts';

/** A backlog committed before the clock starts, drained by ours, the floors and each peer's configurations. */
export const drainSection = {
  name: 'drain',
  markdown: [{ place: 1, render: drainMarkdown }],
  async run({ P, log, freshOurs, freshGraphile, freshPgBoss }: BenchContext) {
    // The floor claims as many as ours does once the backlog has grown its claims.
    const batch = Number(OURS_THROUGHPUT.WORKER_MAX_BATCH_SIZE);
    const ours = (processes: number, env: Record<string, string>) => async () =>
      oursDrain(await freshOurs(), { topic: 'bench.noop', count: P.drainMessages, processes, env });
    const floor = (lanes: number) => async () => drainFloor(await freshOurs(), { count: P.drainMessages, lanes, batch });
    const graphile = (keyed: boolean): Config<string, Drain>[] => {
      const { key, system, label } = graphileConfig(keyed);
      const cli = async () => graphileDrain(await freshGraphile(), P.drainMessages, P.graphileProcesses, keyed);
      const inProcess = async () => graphileRunDrain(await freshGraphile(), P.drainMessages, keyed);
      return [
        { key: key('graphileCli'), system, label: label(`graphile-worker ${P.graphileProcesses} × --once`), measure: cli },
        { key: key('graphileRun'), system, label: label('graphile-worker run() in-process'), measure: inProcess },
      ];
    };
    const pgBoss = (cfg: PgBossConfig) => async (r: number) => pgBossDrain(await freshPgBoss(), P.drainMessages, r, cfg);
    const configs = await measureEach(
      P.runs,
      [
        { key: 'ours1', label: 'ours ×1', measure: ours(1, OURS_THROUGHPUT) },
        { key: 'ours2', label: 'ours ×2', measure: ours(2, OURS_THROUGHPUT) },
        // One process at the defaults and the default log level: what a user gets without tuning.
        { key: 'ours1Default', label: 'ours ×1, defaults, LOG_LEVEL=info', measure: ours(1, { LOG_LEVEL: 'info' }) },
        ...[1, 2].map((lanes) => ({ key: `floor${lanes}`, system: 'floor', label: `drain floor ×${lanes}`, measure: floor(lanes) })),
        ...graphile(false),
        ...graphile(true),
        ...P.pgBossConfigs.map((cfg) => ({ ...pgBossConfig(cfg), measure: pgBoss(cfg) })),
      ],
      { log, show: (d) => `${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)` },
    );
    const c = compareConfigs(configs, (d) => d.perSecond, ['ours1', 'ours2', 'ours1Default'], ['ours1', 'ours2']);
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
