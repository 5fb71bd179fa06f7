import { mm, n, targetLines, x } from '../lib/markdown.ts';
import { repeatOf, round, type Repeated } from '../lib/stats.ts';
import type { BenchContext, BenchSection } from '../context.ts';
import type { BenchResults } from '../results.ts';
import { webhookIsolation, webhookThroughput } from '../webhooks.ts';

type Throughput = { perSecond: number; seconds: number };
/** CPU µs per delivery: the sender's process, the receiver's, PostgreSQL's (results.ts). */
type Cpu = { sender: number; receiver: number; postgres: number };
type Isolation = { aloneP50: number; aloneP99: number; besideP50: number; besideP99: number; p99Ratio: number };

/** Deliveries/s to a no-op receiver (kept-alive and a connection per attempt), and a healthy endpoint beside a hanging one. */
export const webhooksSection = {
  name: 'webhooks',
  markdown: [{ place: 9, render: webhooksMarkdown }],
  async run({ P, log, freshOurs, results }: BenchContext) {
    const throughput: Throughput[] = [];
    const isolation: Isolation[] = [];
    const perAttempt: Throughput[] = [];
    const cpu: Cpu[] = [];
    const cpuPerAttempt: Cpu[] = [];
    for (let r = 0; r < P.runs; r++) {
      // Kept-alive connections (the default) and a new connection per attempt, turn about.
      for (const keepAlive of r % 2 === 0 ? [true, false] : [false, true]) {
        const t = await webhookThroughput(await freshOurs(), P.webhookDeliveries, { WEBHOOK_KEEP_ALIVE: String(keepAlive) });
        (keepAlive ? throughput : perAttempt).push({ perSecond: t.perSecond, seconds: t.seconds });
        const c = t.cpuMicrosPerDelivery;
        if (c.postgres !== null) (keepAlive ? cpu : cpuPerAttempt).push({ sender: c.sender, receiver: c.receiver, postgres: c.postgres });
        log(
          `   webhooks to a no-op receiver, ${keepAlive ? 'kept-alive connections' : 'a connection per attempt'}: ${t.perSecond} deliveries/s (${t.seconds} s, ${t.endpoints} endpoints, ${t.connections} connections; CPU µs per delivery: sender ${c.sender}, receiver ${c.receiver}, PostgreSQL ${c.postgres ?? 'unknown'})`,
        );
      }
      const i = await webhookIsolation(await freshOurs(), { rate: P.webhookRate, seconds: P.webhookSeconds });
      isolation.push({
        aloneP50: i.alone.p50Ms,
        aloneP99: i.alone.p99Ms,
        besideP50: i.besideHanging.p50Ms,
        besideP99: i.besideHanging.p99Ms,
        p99Ratio: i.p99Ratio,
      });
      log(
        `   healthy endpoint p50/p99: alone ${i.alone.p50Ms}/${i.alone.p99Ms} ms, beside a hanging one ${i.besideHanging.p50Ms}/${i.besideHanging.p99Ms} ms (${i.p99Ratio}×)`,
      );
    }
    const tp = repeatOf(throughput);
    const pa = repeatOf(perAttempt);
    const noop = noopDrainOf(results);
    return {
      webhooks: {
        deliveries: P.webhookDeliveries,
        throughput: tp,
        throughputPerAttemptConnection: pa,
        keepAliveRatio: round(tp.median.perSecond / pa.median.perSecond, 3),
        ...(cpu.length > 0 && cpuPerAttempt.length > 0 ? { cpu: repeatOf(cpu), cpuPerAttemptConnection: repeatOf(cpuPerAttempt) } : {}),
        ratioToNoopDrain: noop ? round(tp.median.perSecond / noop, 3) : null,
        isolation: repeatOf(isolation),
      },
    };
  },
} satisfies BenchSection;

/** Our no-op drain ×1, when the drain section ran before (typed here: the results' type is read from the sections). */
const noopDrainOf = (r: BenchResults): number | undefined => r.drain?.configs.ours1?.runs.median.perSecond;

const cpuCell = (c: Repeated<Cpu>) => {
  const m = c.median;
  return `${n(m.sender)} / ${n(m.receiver)} / ${n(m.postgres)} (${n(m.sender + m.receiver + m.postgres)} in all)`;
};

function webhooksMarkdown(r: BenchResults): string[] {
  if (!r.webhooks) return [];
  const w = r.webhooks;
  const p = r.params;
  const runs = (rep: { runs: Throughput[] }) => rep.runs.map((v) => n(v.perSecond)).join(', ');
  const L = [
    `## 9. Webhooks (scripts/bench/webhooks.ts)`,
    '',
    `${n(w.deliveries)} deliveries, written before the clock starts, sent by one process's webhook sender (its defaults: 32 in flight, 4 per endpoint, 8 per host) to 8 endpoints of a local receiver that answers 204 at once; each signed, POSTed and its attempt recorded; on kept-alive connections (the default), and, in the same runs, on a new connection per attempt (WEBHOOK_KEEP_ALIVE=false).`,
    '',
    '| Figure | Median | Runs |',
    '|---|---:|---|',
    `| deliveries/s to a no-op receiver, kept-alive connections | ${mm(w.throughput, 'perSecond')} | ${runs(w.throughput)} |`,
    ...(w.throughputPerAttemptConnection
      ? [
          `| deliveries/s to a no-op receiver, a new connection per attempt | ${mm(w.throughputPerAttemptConnection, 'perSecond')} | ${runs(w.throughputPerAttemptConnection)} |`,
          `| kept-alive / a connection per attempt (medians) | ${x(w.keepAliveRatio)} | |`,
        ]
      : []),
    ...(w.cpu && w.cpuPerAttemptConnection
      ? [
          `| CPU µs per delivery, kept-alive: sender / receiver / PostgreSQL | ${cpuCell(w.cpu)} | |`,
          `| CPU µs per delivery, a connection per attempt: sender / receiver / PostgreSQL | ${cpuCell(w.cpuPerAttemptConnection)} | |`,
        ]
      : []),
    `| healthy endpoint p50 / p99, alone (ms) | ${mm(w.isolation, 'aloneP50', 1)} / ${mm(w.isolation, 'aloneP99', 1)} | ${w.isolation.runs.map((v) => `${n(v.aloneP99, 1)}`).join(', ')} (p99) |`,
    `| healthy endpoint p50 / p99 beside an endpoint that never answers, with ${n(1000)} deliveries due (ms) | ${mm(w.isolation, 'besideP50', 1)} / ${mm(w.isolation, 'besideP99', 1)} | ${w.isolation.runs.map((v) => `${n(v.besideP99, 1)}`).join(', ')} (p99) |`,
    '',
    `Latency: ${n(p.webhookRate)} booking events a second for ${n(p.webhookSeconds)} s, each recorded as the fan-out handler records it and the sender woken; clock from the record to the request's arrival at the receiver.` +
      (w.ratioToNoopDrain === null ? '' : ` Deliveries/s over our no-op outbox drain ×1: ${x(w.ratioToNoopDrain)}.`),
    '',
  ];
  targetLines(L, r.targets, 'Webhooks');
  return L;
}
