import { mm, n, targetLines, x } from '../lib/markdown.ts';
import { repeatOf, round } from '../lib/stats.ts';
import type { BenchContext, BenchSection } from '../context.ts';
import { startNatsCluster, startNatsServer } from '../../lib/nats.ts';
import { RELAY_CONCURRENCY, relayDrain, relayFloor } from '../relay.ts';
import type { BenchResults, Drain } from '../results.ts';

/** The events relay into JetStream against a bare JetStream client, and into a three-node cluster. */
export const relaySection: BenchSection = {
  name: 'relay',
  markdown: [{ place: 8, render: relayMarkdown }],
  async run(ctx: BenchContext) {
    const { P, log, natsServer } = ctx;
    if (!natsServer) return { relay: null };
    const runs = { relay: [] as Drain[], floor: [] as Drain[], replicated: [] as Drain[] };
    const show = (who: string, d: Drain) => log(`   ${who}: ${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`);
    for (let r = 0; r < P.runs; r++) {
      const one = await relayRun(ctx, r);
      for (const k of ['relay', 'floor', 'replicated'] as const) runs[k].push(one[k]);
      show('relay into JetStream', one.relay);
      show(`relay floor (bare JetStream client, ${RELAY_CONCURRENCY} in flight)`, one.floor);
      show('relay into a 3-node cluster, 3 replicas', one.replicated);
    }
    const d = repeatOf(runs.relay);
    const f = repeatOf(runs.floor);
    const c = repeatOf(runs.replicated);
    const relay = {
      messages: P.relayMessages,
      relay: d,
      floor: f,
      ratio: round(d.median.perSecond / f.median.perSecond, 3),
      replicated: c,
      replicatedRatio: round(c.median.perSecond / d.median.perSecond, 3),
    };
    log(`   relay / relay floor: ${relay.ratio}×; 3 replicas / 1: ${relay.replicatedRatio}×`);
    return { relay };
  },
};

/** Interleaved; each measurement on a fresh database and into a fresh nats-server (empty store). */
async function relayRun({ P, freshOurs }: BenchContext, r: number): Promise<Record<'relay' | 'floor' | 'replicated', Drain>> {
  const withNats = async <T>(fn: (url: string) => Promise<T>) => {
    const nats = await startNatsServer({ name: 'bench' });
    try {
      return await fn(nats.url);
    } finally {
      await nats.destroy();
    }
  };
  // A run that lost or doubled messages is not measured, it is broken.
  const check = (what: string, stored: number | null) => {
    if (stored !== P.relayMessages) throw new Error(`${what} run ${r + 1}: ${stored} messages in the stream, ${P.relayMessages} published`);
  };
  const d = await withNats(async (natsUrl) =>
    relayDrain({ databaseUrl: await freshOurs(), count: P.relayMessages, handler: 'relay', natsUrl }),
  );
  check('relay', d.streamMessages);
  const f = await withNats(async (natsUrl) => relayFloor({ databaseUrl: await freshOurs(), natsUrl, count: P.relayMessages }));
  check('relay floor', f.streamMessages);
  // The same relay into a fresh three-node cluster, the stream at three replicas: each PubAck
  // waits for a majority of the replicas (in memory: Debian's 2.9 cannot fsync every write, so
  // this measures replication, not fsync).
  const cluster = await startNatsCluster({ name: 'bench', size: 3 });
  try {
    await cluster.waitForPlacement(3);
    const c = await relayDrain({
      databaseUrl: await freshOurs(),
      count: P.relayMessages,
      handler: 'relay',
      natsUrl: cluster.url,
      replicas: 3,
    });
    check('relay at 3 replicas', c.streamMessages);
    return {
      relay: { perSecond: d.perSecond, drainSeconds: d.seconds },
      floor: { perSecond: f.perSecond, drainSeconds: f.seconds },
      replicated: { perSecond: c.perSecond, drainSeconds: c.seconds },
    };
  } finally {
    await cluster.destroy();
  }
}

function relayMarkdown(r: BenchResults): string[] {
  if (r.relay === undefined) return [];
  const L = [
    `## 8. Relaying the outbox into JetStream (${n(r.params.relayMessages)} booking.created messages, committed before the clock starts)`,
    '',
  ];
  if (!r.relay) return [...L, 'Not measured (nats-server not installed).', ''];
  const rl = r.relay;
  const runs = (rep: typeof rl.relay) => rep.runs.map((v) => n(v.perSecond)).join(', ');
  L.push('| Configuration | Messages/s | Time (s) | Runs (msg/s) |', '|---|---:|---:|---|');
  L.push(
    `| events relay into JetStream (in-process worker, batch 500 / concurrency 32, PubAck awaited) | ${mm(rl.relay, 'perSecond')} | ${mm(rl.relay, 'drainSeconds', 2)} | ${runs(rl.relay)} |`,
  );
  L.push(
    `| relay floor: the same messages from a bare JetStream client, 32 publishes in flight | ${mm(rl.floor, 'perSecond')} | ${mm(rl.floor, 'drainSeconds', 2)} | ${runs(rl.floor)} |`,
  );
  if (rl.replicated) {
    L.push(
      `| events relay into a three-node cluster, the stream at three replicas (Debian's nats-server 2.9: no fsync per write) | ${mm(rl.replicated, 'perSecond')} | ${mm(rl.replicated, 'drainSeconds', 2)} | ${runs(rl.replicated)} |`,
    );
  }
  L.push('', `Relay / relay floor (medians): ${x(rl.ratio)}.`, '');
  if (rl.replicatedRatio !== undefined) L.push(`Relay at three replicas / at one (medians): ${x(rl.replicatedRatio)}.`, '');
  targetLines(L, r.targets, 'Relay');
  return L;
}
