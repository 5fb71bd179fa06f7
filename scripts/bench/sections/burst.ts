import { graphileBurst, oursBurst, pgBossBurst, type Burst, type IdleSpell } from '../burst.ts';
import { comparedTables, n, targetLines } from '../lib/markdown.ts';
import { recorder } from '../lib/recorder.ts';
import { compareConfigs } from '../lib/stats.ts';
import { OURS_THROUGHPUT, pgBossKey, pgBossSystem, type BenchContext, type BenchSection } from '../context.ts';
import { PEERS } from '../peers/guarantees.ts';
import { pgBossLabel } from '../peers/pgboss.ts';
import type { BenchResults } from '../results.ts';

/** Idle long-running workers of each system hit by one burst committed in one statement. */
export const burstSection = {
  name: 'burst',
  markdown: [{ place: 1.5, render: burstMarkdown }],
  async run(ctx: BenchContext) {
    const { P, log } = ctx;
    const rec = recorder<Burst>(log, (b) => `${Math.round(b.perSecond)} msg/s (${b.seconds.toFixed(2)} s from COMMIT)`);
    for (let r = 0; r < P.runs; r++) {
      for (const warm of P.burstWarmUps) await burstRun(ctx, rec, warm);
    }
    const configs = rec.configs();
    const oursKeys = Object.keys(configs).filter((k) => configs[k]!.system === 'ours');
    return { burst: { messages: P.burstMessages, ...compareConfigs(configs, (b) => b.perSecond, oursKeys, oursKeys) } };
  },
} satisfies BenchSection;

/** One burst of every configuration, all after a warm-up or all cold. */
async function burstRun(ctx: BenchContext, rec: ReturnType<typeof recorder<Burst>>, warm: boolean) {
  const { P, freshOurs, freshGraphile, freshPgBoss } = ctx;
  const n = P.burstMessages;
  const spell: IdleSpell = { warm, idleMs: P.burstIdleMs };
  // Keys and labels: the warm-up run is the plain one, the other is "cold".
  const k = (key: string) => (warm ? key : `${key}Cold`);
  const l = (label: string) => (warm ? label : `${label}, cold`);
  for (const processes of [1, 2]) {
    await rec.measure(k(`ours${processes}`), 'ours', l(`ours ×${processes}`), async () =>
      oursBurst(await freshOurs(), n, processes, OURS_THROUGHPUT, spell),
    );
  }
  for (const keyed of [false, true]) {
    const [q, sys, ql] = keyed ? ['Keyed', PEERS.graphile.same, ', a queue per key'] : ['', PEERS.graphile.fastest, ''];
    for (const processes of P.burstGraphileProcesses) {
      await rec.measure(k(`graphileCli${processes}${q}`), sys, l(`graphile-worker CLI ×${processes}${ql}`), async () =>
        graphileBurst(await freshGraphile(), n, spell, { processes, keyed }),
      );
    }
    await rec.measure(k(`graphileRun${q}`), sys, l(`graphile-worker run() in-process${ql}`), async () =>
      graphileBurst(await freshGraphile(), n, spell, { keyed }),
    );
  }
  for (const cfg of P.pgBossConfigs) {
    await rec.measure(k(pgBossKey(cfg)), pgBossSystem(cfg), l(`pg-boss ${pgBossLabel(cfg)}`), async () =>
      pgBossBurst(await freshPgBoss(), n, cfg, spell),
    );
  }
}

function burstMarkdown(r: BenchResults): string[] {
  if (!r.burst) return [];
  const b = r.burst;
  const L: string[] = [];
  L.push(
    `## 1b. Idle workers hit by a burst (${n(b.messages)} no-op messages committed in one statement; clock from COMMIT to nothing pending)`,
    '',
  );
  const idle = r.params.burstIdleMs / 1000;
  comparedTables(
    L,
    b,
    { rate: 'perSecond', time: 'seconds', timeHead: 'Seconds from COMMIT' },
    `Each configuration after a warm-up batch (100 handled, then ${idle} s idle) and "cold" (started, ${idle} s idle, no warm-up).`,
  );
  targetLines(L, r.targets, 'Burst');
  return L;
}
