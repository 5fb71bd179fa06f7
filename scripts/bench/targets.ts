import type { BenchResults } from './run.ts';
import { round } from './lib/stats.ts';

/**
 * The performance targets (what "good" means; the run reports where we stand and never fails on
 * them). `met` is null when the figure could not be measured in this run.
 */
export interface TargetResult {
  name: string;
  target: string;
  value: string;
  met: boolean | null;
}

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
  // settings; in the burst, the warmed-up one) against the strongest peer configuration measured
  // (every peer in every configuration, the best median of all). The report lists every other ratio.
  const drain = r.drain?.ratios;
  const burst = r.burst?.ratios;
  for (const n of [1, 2]) {
    add(`Drain (backlog): ours ×${n} / strongest peer configuration`, '≥ 1.2', drain?.[`ours${n}`]?.bestPeer, (v) => v >= 1.2, '×');
  }
  for (const n of [1, 2]) {
    add(`Burst (idle workers): ours ×${n} / strongest peer configuration`, '≥ 1.2', burst?.[`ours${n}`]?.bestPeer, (v) => v >= 1.2, '×');
  }
  const lat = r.latency;
  add('Latency p50: ours / graphile-worker', '≤ 0.8', lat ? lat.ours.median.p50 / lat.graphile.median.p50 : null, (v) => v <= 0.8, '×');
  add('Latency p99: ours / graphile-worker', '≤ 0.8', lat ? lat.ours.median.p99 / lat.graphile.median.p99 : null, (v) => v <= 0.8, '×');
  // The floors: the same work with no framework around it (scripts/bench/floors.ts, relay.ts).
  for (const n of [1, 2] as const) {
    add(`Drain: ours ×${n} / drain floor ×${n}`, '≥ 0.8', r.drain?.floorRatios[`ours${n}`], (v) => v >= 0.8, '×');
  }
  add('Relay into JetStream / relay floor (msg/s)', '≥ 0.8', r.relay?.ratio, (v) => v >= 0.8, '×');
  add(
    'Webhooks: healthy endpoint p99 beside a hanging one / alone',
    '≤ 1.2',
    r.webhooks ? r.webhooks.isolation.median.besideP99 / r.webhooks.isolation.median.aloneP99 : null,
    (v) => v <= 1.2,
    '×',
  );
  add('API / pgbench -M prepared at 8 connections', '≥ 0.6', r.api?.prepared?.ratio ?? null, (v) => v >= 0.6, '×');
  add('Outbox cost to the booking transaction', '≤ 15 %', r.outboxCost?.costPercent ?? null, (v) => v <= 15, ' %');
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
