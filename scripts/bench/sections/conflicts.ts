import { apiConflicts, type ApiFixture } from '../api.ts';
import { mm, n } from '../lib/markdown.ts';
import { repeatOf, round } from '../lib/stats.ts';
import type { BenchContext } from '../context.ts';
import type { BenchResults } from '../results.ts';

/** Bookings of the same dates in contention (part of the api section): one winner a round, the rest 409. */
export async function conflicts({ P, log }: BenchContext, fixture: ApiFixture) {
  const runs = [];
  for (let r = 0; r < P.runs; r++) {
    const c = await apiConflicts(fixture, P.conflictConnections, P.httpSeconds);
    runs.push(c);
    log(
      `   conflicts: ${c.rps} req/s, ${c.rounds} rounds, ${c.share409} % 409, ${c.created201} × 201 (${c.bookingsKept} kept, at most ${c.maxWinnersPerRound} a round), ${c.server5xx} × 5xx, ${c.other} other`,
    );
  }
  return {
    connections: P.conflictConnections,
    // Every figure of a run but the clients' errors (requests that got no answer).
    runs: repeatOf(runs.map(({ errors: _, ...figures }) => figures)),
    expectedShare409: round(100 * (1 - 1 / P.conflictConnections), 2),
  };
}

export function conflictsMarkdown(r: BenchResults): string[] {
  if (!r.conflicts) return [];
  const c = r.conflicts.runs.median;
  const rr = r.conflicts.runs;
  return [
    `## 7. Conflicts under contention (${r.conflicts.connections} connections, all booking the same dates)`,
    '',
    '| req/s | p99 (ms) | 409 share | expected | rounds | 201 | bookings kept | most winners in a round | 5xx | other |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    `| ${mm(rr, 'rps')} | ${mm(rr, 'p99', 1)} | ${n(c.share409, 2)} % | ${n(r.conflicts.expectedShare409, 2)} % | ${n(c.rounds)} | ${n(c.created201)} | ${n(c.bookingsKept)} | ${n(rr.max.maxWinnersPerRound)} | ${n(rr.max.server5xx)} | ${n(rr.max.other)} |`,
    '',
  ];
}
