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

  // The drain targets compare the best of 1 and 2 processes: the labelled best-of-ours row, beside
  // which the report shows every configuration's own ratio.
  add('Drain (backlog, --until-empty): best of ours ×1/×2 / best peer', '≥ 1', r.drain?.ratios.bestOfOurs?.bestPeer, (v) => v >= 1, '×');
  add('Drain (idle workers, one burst): best of ours ×1/×2 / best peer', '≥ 1', r.burst?.ratios.bestOfOurs?.bestPeer, (v) => v >= 1, '×');
  add(
    'Latency p50: ours / graphile-worker',
    '≤ 1',
    r.latency ? r.latency.ours.median.p50 / r.latency.graphile.median.p50 : null,
    (v) => v <= 1,
    '×',
  );
  add(
    'Latency p99: ours / graphile-worker',
    '≤ 1',
    r.latency ? r.latency.ours.median.p99 / r.latency.graphile.median.p99 : null,
    (v) => v <= 1,
    '×',
  );
  const at8 = r.api?.byConnections.find((c) => c.connections === 8);
  add('API / pgbench at 8 connections', '≥ 0.5', at8?.ratio ?? null, (v) => v >= 0.5, '×');
  add('Outbox cost to the booking transaction', '≤ 15 %', r.outboxCost?.costPercent ?? null, (v) => v <= 15, ' %');
  add('Claim time: 1,000,000 DONE / empty', '≤ 1.2', r.claim?.runs.median.ratio, (v) => v <= 1.2, '×');
  add('I/O-bound scaling: 4 processes / 1', '≥ 3.5', r.io?.scaling.x4, (v) => v >= 3.5, '×');
  add('Relay into JetStream / no-op drain (msg/s)', '≥ 0.5', r.relay?.ratio, (v) => v >= 0.5, '×');
  add(
    'Conflicts: 5xx answers under contention',
    '0',
    r.conflicts ? Math.max(...r.conflicts.runs.runs.map((x) => x.server5xx)) : null,
    (v) => v === 0,
  );
  return out;
}
