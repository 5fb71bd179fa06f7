import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { BenchContext, PartOf } from '../context.ts';
import { startOursInProcess } from '../ours.ts';
import { n } from '../lib/markdown.ts';
import { measureEach, percentile, round } from '../lib/stats.ts';
import { startGraphileLatencyRunner } from '../peers/graphile.ts';
import { startPgBossLatencyWorker } from '../peers/pgboss.ts';

/*
 * A snapshot held open (a long report, pg_dump, a transaction left idle) while messages arrive at
 * a steady rate: every dead version of every row claimed and completed since it began stays
 * reachable, in the table and in its indexes, and each claim walks past them. Each system gets the
 * same load on a fresh database: one message a transaction at a steady rate, its worker in-process
 * as the latency section runs it (LISTEN/NOTIFY), a minute of it, then a REPEATABLE READ
 * transaction that has read a row holds its snapshot for four minutes, then a little more load.
 * Commit → handler latency (the clock starts just before COMMIT) of the messages committed in the
 * minute before the snapshot against those committed in the second half of its hold; and what was
 * left behind once the load stopped (every message must arrive).
 */

/**
 * Each system's worker as the latency section starts it: how a message is written, how the worker
 * stops. The peers in their same-guarantee configurations (a key per job, a queue per key).
 */
type StartConsumer = (
  url: string,
  arrived: (id: number) => void,
) => Promise<{ insert(client: pg.Client, id: number): Promise<void>; stop(): Promise<void> }>;

/** One system under the load, the snapshot held in its middle. */
async function underHeldSnapshot(
  url: string,
  start: StartConsumer,
  p: { rate: number; beforeMs: number; heldMs: number; afterMs: number },
) {
  const committed = new Map<number, number>();
  const latency = new Map<number, number>();
  // Set once the consumer and the clients are ready: their start-up (pg-boss makes its schema) is
  // not part of the minute before, which a slow start would otherwise shorten, in a smoke run to nothing.
  let t0 = Number.POSITIVE_INFINITY;
  const consumer = await start(url, (id) => {
    const at = committed.get(id);
    if (at !== undefined) latency.set(id, performance.now() - t0 - at);
  });
  const producers = await Promise.all(
    Array.from({ length: 4 }, async () => {
      const c = new pg.Client({ connectionString: url, application_name: 'bench-held-producer' });
      await c.connect();
      return c;
    }),
  );
  const holder = new pg.Client({ connectionString: url, application_name: 'bench-held-snapshot' });
  await holder.connect();
  t0 = performance.now();
  const free = [...producers];
  let produced = 0;
  let skipped = 0;
  const inFlight = new Set<Promise<void>>();
  const send = async (c: pg.Client, id: number) => {
    await c.query('begin');
    await consumer.insert(c, id);
    // Recorded before COMMIT is sent: the worker may handle the message before this continues.
    committed.set(id, performance.now() - t0);
    await c.query('commit');
  };
  try {
    const end = p.beforeMs + p.heldMs + p.afterMs;
    let snapshot: 'not yet' | 'held' | 'released' = 'not yet';
    for (let i = 0; ; i++) {
      const due = (i * 1000) / p.rate;
      if (due >= end) break;
      const wait = due - (performance.now() - t0);
      if (wait > 0) await sleep(wait);
      const now = performance.now() - t0;
      if (snapshot === 'not yet' && now >= p.beforeMs) {
        snapshot = 'held';
        await holder.query('begin isolation level repeatable read');
        await holder.query('select 1 from pg_class limit 1'); // the snapshot is taken by the first read
      } else if (snapshot === 'held' && now >= p.beforeMs + p.heldMs) {
        snapshot = 'released';
        await holder.query('commit');
      }
      const c = free.pop();
      if (!c) {
        skipped++; // every producer is still committing: the rate is the database's, not ours
        continue;
      }
      const id = produced++;
      const sent = send(c, id).finally(() => {
        free.push(c);
        inFlight.delete(sent);
      });
      inFlight.add(sent);
    }
    await Promise.all(inFlight);
    for (const until = performance.now() + 60_000; latency.size < produced && performance.now() < until;) await sleep(50);
  } finally {
    await consumer.stop();
    for (const c of [...producers, holder]) await c.end().catch(() => {});
  }
  return { produced, skipped, left: produced - latency.size, ...phaseLatencies(committed, latency, p) };
}

/**
 * p50 and p99 (ms) of the messages committed before the snapshot and of those committed in the
 * second half of its hold, and the two p99s' ratio.
 */
function phaseLatencies(committed: Map<number, number>, latency: Map<number, number>, p: { beforeMs: number; heldMs: number }) {
  const within = (from: number, to: number) =>
    [...latency].filter(([id]) => committed.get(id)! >= from && committed.get(id)! < to).map(([, ms]) => ms);
  const before = within(0, p.beforeMs);
  const heldLate = within(p.beforeMs + p.heldMs / 2, p.beforeMs + p.heldMs);
  const p99Before = round(percentile(before, 99), 2);
  const p99Held = round(percentile(heldLate, 99), 2);
  return {
    p50Before: round(percentile(before, 50), 2),
    p99Before,
    p50Held: round(percentile(heldLate, 50), 2),
    p99Held,
    ratio: round(p99Held / p99Before, 2),
  };
}

export const heldSnapshotSection = {
  name: 'held-snapshot',
  markdown: [{ place: 5.5, render: heldSnapshotMarkdown }],
  async run(ctx: BenchContext) {
    const { P, log } = ctx;
    const phases = {
      rate: P.heldRate,
      beforeMs: P.heldBeforeSeconds * 1000,
      heldMs: P.heldSeconds * 1000,
      afterMs: P.heldAfterSeconds * 1000,
    };
    const underHeld = (fresh: () => Promise<string>, start: StartConsumer) => async () => underHeldSnapshot(await fresh(), start, phases);
    const configs = [
      { key: 'ours', label: 'ours', measure: underHeld(ctx.freshOurs, startOursInProcess) },
      {
        key: 'pgBossKeyed',
        label: 'pg-boss key_strict_fifo (batch 1)',
        measure: underHeld(ctx.freshPgBoss, (url, arrived) => startPgBossLatencyWorker(url, true, arrived)),
      },
      {
        key: 'graphileKeyed',
        label: 'graphile-worker, a queue per key',
        measure: underHeld(ctx.freshGraphile, (url, arrived) => startGraphileLatencyRunner(url, arrived, true)),
      },
    ];
    const show = (f: Awaited<ReturnType<typeof underHeldSnapshot>>) =>
      `p99 ${f.p99Before} ms before, ${f.p99Held} ms in the hold's second half (${f.ratio}×), ${f.left} left`;
    // One run each: the figures of that run.
    const measured = Object.entries(await measureEach(1, configs, { log, show }));
    const systems = Object.fromEntries(measured.map(([k, c]) => [k, { label: c.label, ...c.runs.median }]));
    return { heldSnapshot: { rate: P.heldRate, beforeSeconds: P.heldBeforeSeconds, heldSeconds: P.heldSeconds, systems } };
  },
};

function heldSnapshotMarkdown(r: PartOf<typeof heldSnapshotSection>): string[] {
  const L = ['## 5b. A snapshot held open while messages arrive', ''];
  const h = r.heldSnapshot;
  if (!h) return [...L, 'Not measured (the section failed or was left out).', ''];
  L.push(
    `One message a transaction at ${n(h.rate)}/s, the worker in-process (LISTEN/NOTIFY); after ${n(h.beforeSeconds)} s a REPEATABLE READ transaction holds its snapshot for ${n(h.heldSeconds)} s. Commit → handler latency (ms) of the messages committed in the ${n(h.beforeSeconds)} s before and in the hold's second half; one run each:`,
    '',
    '| System | p50 before | p99 before | p50 held | p99 held | p99 held / before | sent | left behind |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
  );
  for (const s of Object.values(h.systems)) {
    L.push(
      `| ${s.label} | ${n(s.p50Before, 2)} | ${n(s.p99Before, 2)} | ${n(s.p50Held, 2)} | ${n(s.p99Held, 2)} | ${n(s.ratio, 2)}× | ${n(s.produced)} | ${n(s.left)} |`,
    );
  }
  L.push('');
  return L;
}
