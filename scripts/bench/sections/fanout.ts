import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { RELAY_HANDLER } from '../../../src/events/relay.ts';
import { SUBSCRIPTIONS } from '../../../src/messages/subscriptions.ts';
import { startApi, type ApiFixture } from '../api.ts';
import { pgbenchBookings } from '../api-pgbench.ts';
import { OURS_THROUGHPUT, type BenchContext, type PartOf } from '../context.ts';
import { newestRowIndexEntries } from '../lib/outbox.ts';
import { mm, n, x } from '../lib/markdown.ts';
import { measureEach, round, runsOf } from '../lib/stats.ts';
import { walAround } from '../lib/wal.ts';
import { oursDrain } from '../ours.ts';
import { withClient } from '../../lib/postgres.ts';

/*
 * One outbox row per message, as the outbox writes it (every handler of the topic on one row,
 * handlers_done tracking each), against one row per subscription, as a queue that fans out at
 * enqueue writes it (pg-boss: a job per subscribed queue). The two paths where the choice costs:
 * the booking's transaction (pgbench: tps, p99, WAL and index entries per booking) and the drain
 * (the real worker: handler runs per second, WAL per handler run). ADR 0048 decides on them.
 */

/** A pgbench run of the booking transaction, with the WAL it wrote per transaction. */
type HotPathRun = { tps: number; p99: number; walBytesPerTransaction: number };
/** A drain counted in effects (handler runs), with the WAL from the first insert through the last DONE per effect. */
type FanoutDrain = { effectsPerSecond: number; seconds: number; walBytesPerEffect: number };

/** booking.created's handlers, in the order of subscriptions.ts, then the events relay: the first K are a booking's K rows. */
const BOOKING_CREATED_HANDLERS = [...SUBSCRIPTIONS.filter((s) => s.topic === 'booking.created').map((s) => s.name), RELAY_HANDLER];

export const fanoutSection = {
  name: 'fanout',
  markdown: [{ place: 4.5, render: fanoutMarkdown }],
  async run(ctx: BenchContext) {
    return { fanout: { handlers: ctx.P.fanoutHandlers, hotPath: await hotPath(ctx), drain: await drain(ctx) } };
  },
};

/** The booking transaction's variants: no outbox row, today's one row, and K rows for each K. */
function hotPathVariants(handlers: number[]): { key: string; rows: number; fanOutTo: readonly string[] | null }[] {
  return [
    { key: 'none', rows: 0, fanOutTo: null },
    { key: 'perMessage', rows: 1, fanOutTo: [] },
    ...handlers.map((k) => ({ key: `perSubscription${k}`, rows: k, fanOutTo: BOOKING_CREATED_HANDLERS.slice(0, k) })),
  ];
}

/** pgbench's booking transaction in each variant, interleaved (A B C … A B C …), on a database of its own. */
async function hotPath(ctx: BenchContext) {
  const { P, server, log, pgbench } = ctx;
  if (!pgbench) return null;
  const logDir = path.join(server.dir, 'fanout');
  mkdirSync(logDir, { recursive: true });
  // The API only signs up the guests and properties pgbench books; it is stopped before measuring.
  const fixture: ApiFixture = await startApi(
    await server.createDatabase('stayhub_fanout', server.ourTemplate),
    { guests: P.apiGuests, properties: P.apiProperties },
    logDir,
  );
  await fixture.close();
  const variants = hotPathVariants(P.fanoutHandlers);
  const indexEntriesPerTransaction: Record<string, number> = {};
  let indexesOnPartition = 0;
  const c = P.outboxCostClients;
  const configs = variants.map((v) => ({
    key: v.key,
    label: `fanout hot path, ${v.key}`,
    async measure(r: number): Promise<HotPathRun> {
      const { result, wal } = await walAround(fixture.url, () =>
        pgbenchBookings(fixture, P, c, { variant: v.fanOutTo ? undefined : 'none', fanOutTo: v.fanOutTo ?? [] }),
      );
      if (r === 0) {
        // The newest outbox row is one of this variant's (none writes no row: nothing to count).
        const newest = v.rows > 0 ? await withClient(fixture.url, newestRowIndexEntries) : null;
        indexEntriesPerTransaction[v.key] = (newest?.entries ?? 0) * v.rows;
        indexesOnPartition = newest?.indexes ?? indexesOnPartition;
      }
      return { tps: result.tps, p99: result.p99, walBytesPerTransaction: wal.bytes / result.transactions };
    },
  }));
  const show = (h: HotPathRun) => `${h.tps} tps ${Math.round(h.walBytesPerTransaction)} B`;
  const measured = runsOf(await measureEach(P.fanoutRuns, configs, { log, show }));
  return {
    clients: c,
    variants: measured,
    indexEntriesPerTransaction,
    indexesOnPartition,
  };
}

/**
 * M messages of a topic with K no-op handlers, one row each (the worker runs the K in turn,
 * recording each but the last in handlers_done, the last with DONE), against M×K rows of a topic
 * with one no-op handler. Our throughput settings, one process, a fresh database each run;
 * interleaved. WAL of the drain's database from before the backlog's insert to the last DONE (the
 * worker's start included, the same for both).
 */
async function drain(ctx: BenchContext) {
  const { P, log, freshOurs } = ctx;
  const M = P.fanoutMessages;
  const measure = (rows: number, effects: number, topic: string, env: Record<string, string>) => async (): Promise<FanoutDrain> => {
    const url = await freshOurs();
    const { result, wal } = await walAround(url, () =>
      oursDrain(url, { topic, count: rows, processes: 1, env: { ...OURS_THROUGHPUT, ...env } }),
    );
    return { effectsPerSecond: effects / result.drainSeconds, seconds: result.drainSeconds, walBytesPerEffect: wal.bytes / effects };
  };
  const configs = P.fanoutHandlers.flatMap((k) => [
    {
      key: `perMessage${k}`,
      label: `fanout drain K=${k}, per message`,
      measure: measure(M, M * k, 'bench.fanout', { BENCH_FANOUT_HANDLERS: String(k) }),
    },
    { key: `perSubscription${k}`, label: `fanout drain K=${k}, per subscription`, measure: measure(M * k, M * k, 'bench.noop', {}) },
  ]);
  const show = (d: FanoutDrain) => `${Math.round(d.effectsPerSecond)} effects/s ${Math.round(d.walBytesPerEffect)} B`;
  const m = runsOf(await measureEach(P.fanoutRuns, configs, { log, show }));
  return {
    messages: M,
    byHandlers: P.fanoutHandlers.map((k) => {
      const perMessage = m[`perMessage${k}`]!;
      const perSubscription = m[`perSubscription${k}`]!;
      return {
        handlers: k,
        perMessage,
        perSubscription,
        effectsRatio: round(perSubscription.median.effectsPerSecond / perMessage.median.effectsPerSecond, 3),
        walRatio: round(perSubscription.median.walBytesPerEffect / perMessage.median.walBytesPerEffect, 3),
      };
    }),
  };
}

/** Always written: a run without the figures says why. */
function fanoutMarkdown(r: PartOf<typeof fanoutSection>): string[] {
  const L = ['## 4b. One outbox row per message, or one per subscription (fan-out at enqueue; ADR 0048)', ''];
  const f = r.fanout;
  if (!f) return [...L, 'Not measured (the section failed or was left out).', ''];
  const load = r.load.fanout;
  if (load)
    L.push(`Load average before the section: ${load.loadAverage1m} on ${load.cores} cores: read the ratios, not the absolute figures.`, '');
  if (f.hotPath) {
    const h = f.hotPath;
    const none = h.variants.none!.median.tps;
    L.push(
      `The booking transaction in pgbench, ${h.clients} clients, medians of ${r.params.fanoutRuns} interleaved rounds (min–max); index entries: the partial indexes (of ${h.indexesOnPartition} on the partition) a new row enters, × rows:`,
      '',
      '| Outbox rows per booking | tps | vs no row | p99 (ms) | WAL bytes / booking | index entries / booking |',
      '|---|---:|---:|---:|---:|---:|',
    );
    for (const [key, v] of Object.entries(h.variants)) {
      L.push(
        `| ${variantLabel(key)} | ${mm(v, 'tps')} | ${x(v.median.tps / none)} | ${mm(v, 'p99', 1)} | ${mm(v, 'walBytesPerTransaction')} | ${n(h.indexEntriesPerTransaction[key])} |`,
      );
    }
    L.push('');
  } else {
    L.push('The hot path is not measured (pgbench missing).', '');
  }
  L.push(
    `The drain: ${n(f.drain.messages)} messages of a topic with K no-op handlers on one row each, against ${n(f.drain.messages)}×K rows of one no-op handler each; one worker process, our throughput settings, medians of ${r.params.fanoutRuns} interleaved rounds (min–max). Effects: handler runs. WAL: the drain's database's, from the backlog's insert to the last DONE:`,
    '',
    '| K | effects/s, per message | effects/s, per subscription | ratio | WAL B/effect, per message | WAL B/effect, per subscription | ratio |',
    '|---:|---:|---:|---:|---:|---:|---:|',
  );
  for (const d of f.drain.byHandlers) {
    L.push(
      `| ${d.handlers} | ${mm(d.perMessage, 'effectsPerSecond')} | ${mm(d.perSubscription, 'effectsPerSecond')} | ${x(d.effectsRatio)} | ${mm(d.perMessage, 'walBytesPerEffect')} | ${mm(d.perSubscription, 'walBytesPerEffect')} | ${x(d.walRatio)} |`,
    );
  }
  L.push('');
  return L;
}

function variantLabel(key: string): string {
  if (key === 'none') return 'none (no outbox)';
  if (key === 'perMessage') return '1, every handler on it (today)';
  return `${key.slice('perSubscription'.length)}, one per handler (fan-out)`;
}
