import type { TargetResult } from './context.ts';
import type { BenchResults } from './results.ts';
import { round } from './lib/stats.ts';
import { PEERS } from './peers/guarantees.ts';

/**
 * The performance targets (what "good" means; the run reports where we stand and never fails on
 * them), from a run's results.
 */
export function evaluateTargets(r: BenchResults): TargetResult[] {
  const out: TargetResult[] = [];
  const add = (name: string, target: string, value: number | null | undefined, met: (v: number) => boolean, unit = '') =>
    out.push({
      name,
      target,
      value: value === null || value === undefined || !Number.isFinite(value) ? 'not measured' : `${round(value, 3)}${unit}`,
      met: value === null || value === undefined || !Number.isFinite(value) ? null : met(value),
    });

  // Throughput: each process count of ours (the configuration a deployment runs: our throughput
  // settings; in the burst, the warmed-up one) against each peer's strongest configuration that
  // keeps what we keep (peers/guarantees.ts). Against the fastest configurations, which give some
  // of it up, the report shows the ratios without a target (docs/performance.md says what closing
  // them would take).
  const same = [PEERS.graphile.same, PEERS.pgBoss.same];
  for (const [section, c] of [
    ['Drain (backlog)', r.drain?.ratios],
    ['Burst (idle workers)', r.burst?.ratios],
  ] as const) {
    for (const n of [1, 2]) {
      for (const peer of same) add(`${section}: ours ×${n} / ${peer}`, '≥ 1.2', c?.[`ours${n}`]?.[peer], (v) => v >= 1.2, '×');
    }
  }
  const lat = r.latency;
  const g = lat?.graphileKeyed;
  add(`Latency p50: ours / ${PEERS.graphile.same}`, '≤ 0.8', lat && g ? lat.ours.median.p50 / g.median.p50 : null, (v) => v <= 0.8, '×');
  add(`Latency p99: ours / ${PEERS.graphile.same}`, '≤ 0.8', lat && g ? lat.ours.median.p99 / g.median.p99 : null, (v) => v <= 0.8, '×');
  // The floors: the same work with no framework around it (scripts/bench/floors.ts, relay.ts).
  add('Drain: ours ×1 / drain floor ×1', '≥ 0.9', r.drain?.floorRatios.ours1, (v) => v >= 0.9, '×');
  add('Drain: ours ×2 / drain floor ×2', '≥ 0.8', r.drain?.floorRatios.ours2, (v) => v >= 0.8, '×');
  add('Relay into JetStream / relay floor (msg/s)', '≥ 0.8', r.relay?.ratio, (v) => v >= 0.8, '×');
  add(
    'Webhooks: deliveries/s from one process, kept-alive / a connection per attempt',
    '≥ 5',
    r.webhooks?.keepAliveRatio,
    (v) => v >= 5,
    '×',
  );
  add(
    'Webhooks: healthy endpoint p99 beside a hanging one / alone',
    '≤ 1.2',
    r.webhooks ? r.webhooks.isolation.median.besideP99 / r.webhooks.isolation.median.aloneP99 : null,
    (v) => v <= 1.2,
    '×',
  );
  add('API / pgbench -M prepared at 8 connections', '≥ 0.6', r.api?.prepared?.ratio ?? null, (v) => v >= 0.6, '×');
  add('Outbox cost to the booking transaction', '≤ 15 %', r.outboxCost?.costPercent ?? null, (v) => v <= 15, ' %');
  add('Outbox cost to the booking transaction, prepared', '≤ 15 %', r.outboxCost?.prepared?.costPercent ?? null, (v) => v <= 15, ' %');
  add('Outbox cost to the booking, OUTBOX_WRITES=wal', '≤ 15 %', r.outboxCost?.walWrites.extendedCostPercent ?? null, (v) => v <= 15, ' %');
  add(
    'Outbox cost to the booking, OUTBOX_WRITES=wal, prepared',
    '≤ 15 %',
    r.outboxCost?.walWrites.preparedCostPercent ?? null,
    (v) => v <= 15,
    ' %',
  );
  add('Claim time: 1,000,000 DONE / empty', '≤ 1.2', r.claim?.runs.median.ratio, (v) => v <= 1.2, '×');
  add('I/O-bound scaling: 4 processes / 1', '≥ 3.5', r.io?.scaling.x4, (v) => v >= 3.5, '×');
  add(
    'Conflicts: 5xx answers under contention',
    '0',
    r.conflicts ? Math.max(...r.conflicts.runs.runs.map((x) => x.server5xx)) : null,
    (v) => v === 0,
  );
  // A long history must stay cheap: the housekeeping's purge of an expired day (its partition
  // dropped) beside the worker, and the API on a bookings table holding years of stays.
  const purge = r.purge;
  add('Purge by partition: drain ×1 beside the DROP / alone (msg/s)', '≥ 0.9', purge?.drain.dropRatio, (v) => v >= 0.9, '×');
  add('Purge by partition: claim p50 beside the DROP / alone', '≤ 1.1', purge?.claim.dropP50Ratio, (v) => v <= 1.1, '×');
  add('Purge by partition: claim p99 beside the DROP / alone', '≤ 1.1', purge?.claim.dropP99Ratio, (v) => v <= 1.1, '×');
  add(
    `Booking history: API p99 with ${r.params?.bookingHistory?.toLocaleString('en-US') ?? 'a history of'} past bookings / empty`,
    '≤ 1.2',
    r.apiHistory?.p99Ratio,
    (v) => v <= 1.2,
    '×',
  );
  return out;
}
