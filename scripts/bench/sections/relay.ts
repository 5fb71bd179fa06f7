import { mm, n, targetLines, x } from '../lib/markdown.ts';
import { interleaved, round, type Repeated } from '../lib/stats.ts';
import type { BenchContext, BenchSection } from '../context.ts';
import { startNatsCluster, startNatsServer } from '../../lib/nats.ts';
import { RELAY_CONCURRENCY, relayDrain, relayFloor } from '../relay.ts';
import type { BenchResults, Drain } from '../results.ts';

/** The events relay into JetStream against a bare JetStream client, and into a three-node cluster. */
export const relaySection = {
  name: 'relay',
  markdown: [{ place: 8, render: relayMarkdown }],
  run: async (ctx: BenchContext) => ({ relay: ctx.natsServer ? await measureRelay(ctx) : null }),
} satisfies BenchSection;

/** The relay, its floor and the relay at three replicas, runs interleaved; ratios of medians. */
async function measureRelay({ P, log, freshOurs }: BenchContext) {
  const count = P.relayMessages;
  // A run that lost or doubled messages is not measured, it is broken.
  const checked = (what: string, r: number, d: { perSecond: number; seconds: number; streamMessages: number | null }): Drain => {
    if (d.streamMessages !== count) throw new Error(`${what} run ${r + 1}: ${d.streamMessages} messages in the stream, ${count} published`);
    return { perSecond: d.perSecond, drainSeconds: d.seconds };
  };
  const labels = {
    relay: 'relay into JetStream',
    floor: `relay floor (bare JetStream client, ${RELAY_CONCURRENCY} in flight)`,
    replicated: 'relay into a 3-node cluster, 3 replicas',
  };
  // Each measurement on a fresh database and into a fresh nats-server (empty store).
  const m = await interleaved<Record<keyof typeof labels, Drain>>(
    P.runs,
    {
      relay: async (r) =>
        checked(
          'relay',
          r,
          await withNats(async (natsUrl) => relayDrain({ databaseUrl: await freshOurs(), count, handler: 'relay', natsUrl })),
        ),
      floor: async (r) =>
        checked('relay floor', r, await withNats(async (natsUrl) => relayFloor({ databaseUrl: await freshOurs(), natsUrl, count }))),
      replicated: async (r) =>
        checked('relay at 3 replicas', r, await replicatedDrain(await startNatsCluster({ name: 'bench', size: 3 }), freshOurs, count)),
    },
    { after: (k, d) => log(`   ${labels[k]}: ${Math.round(d.perSecond)} msg/s (${d.drainSeconds.toFixed(2)} s)`) },
  );
  const relay = {
    messages: count,
    relay: m.relay,
    floor: m.floor,
    ratio: round(m.relay.median.perSecond / m.floor.median.perSecond, 3),
    replicated: m.replicated,
    replicatedRatio: round(m.replicated.median.perSecond / m.relay.median.perSecond, 3),
  };
  log(`   relay / relay floor: ${relay.ratio}×; 3 replicas / 1: ${relay.replicatedRatio}×`);
  return relay;
}

async function withNats<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const nats = await startNatsServer({ name: 'bench' });
  try {
    return await fn(nats.url);
  } finally {
    await nats.destroy();
  }
}

/**
 * The same relay into a fresh three-node cluster, the stream at three replicas: each PubAck
 * waits for a majority of the replicas (in memory: Debian's 2.9 cannot fsync every write, so
 * this measures replication, not fsync).
 */
async function replicatedDrain(cluster: Awaited<ReturnType<typeof startNatsCluster>>, freshOurs: () => Promise<string>, count: number) {
  try {
    await cluster.waitForPlacement(3);
    return await relayDrain({ databaseUrl: await freshOurs(), count, handler: 'relay', natsUrl: cluster.url, replicas: 3 });
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
  const row = (label: string, rep: Repeated<Drain>) =>
    L.push(`| ${label} | ${mm(rep, 'perSecond')} | ${mm(rep, 'drainSeconds', 2)} | ${rep.runs.map((v) => n(v.perSecond)).join(', ')} |`);
  L.push('| Configuration | Messages/s | Time (s) | Runs (msg/s) |', '|---|---:|---:|---|');
  row('events relay into JetStream (in-process worker, batch 500 / concurrency 32, PubAck awaited)', rl.relay);
  row('relay floor: the same messages from a bare JetStream client, 32 publishes in flight', rl.floor);
  if (rl.replicated)
    row(
      "events relay into a three-node cluster, the stream at three replicas (Debian's nats-server 2.9: no fsync per write)",
      rl.replicated,
    );
  L.push('', `Relay / relay floor (medians): ${x(rl.ratio)}.`, '');
  if (rl.replicatedRatio !== undefined) L.push(`Relay at three replicas / at one (medians): ${x(rl.replicatedRatio)}.`, '');
  targetLines(L, r.targets, 'Relay');
  return L;
}
