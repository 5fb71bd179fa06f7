import { apiBookings, POOLED_SERVER_CONNECTIONS, startApi, startPooledApi, type ApiFixture } from '../api.ts';
import { pgbenchBookings } from '../api-pgbench.ts';
import { mm, targetLines, x } from '../lib/markdown.ts';
import { repeatOf, round } from '../lib/stats.ts';
import { PREPARED_CONNECTIONS, type BenchContext, type BenchSection } from '../context.ts';
import type { BenchResults } from '../results.ts';
import { conflicts, conflictsMarkdown } from './conflicts.ts';
import { outboxCost, outboxCostMarkdown } from './outbox-cost.ts';

type Rps = { rps: number; p99: number };
type Tps = { tps: number; p99: number };

/**
 * The booking write path: POST /bookings against pgbench running the same SQL, directly and
 * through PgBouncer; then, on the same API, what the outbox costs a booking and bookings of the
 * same dates in contention.
 */
export const apiSection: BenchSection = {
  name: 'api',
  markdown: [
    { place: 3, render: apiMarkdown },
    { place: 4, render: outboxCostMarkdown },
    { place: 7, render: conflictsMarkdown },
  ],
  async run(ctx: BenchContext) {
    const { P, server, log } = ctx;
    const sizes = { guests: P.apiGuests, properties: P.apiProperties };
    const fixture = await startApi(await server.createDatabase('stayhub_api', server.ourTemplate), sizes, server.dir);
    const pooledUrl = await server.createDatabase('stayhub_api_pooled', server.ourTemplate);
    const pooledFixture = await startPooledApi(pooledUrl, sizes, server.dir).catch(async (e: unknown) => {
      await fixture.close();
      throw e;
    });
    if (!pooledFixture) log('   pgbouncer not found (apt-get install -y pgbouncer): the API through PgBouncer is not measured');
    try {
      // Warm-up: JIT, pool connections, plan caches.
      await apiBookings(fixture, 8, Math.min(2, P.httpSeconds));
      if (pooledFixture) await apiBookings(pooledFixture, 8, Math.min(2, P.httpSeconds));
      const api = await writePath(ctx, fixture, pooledFixture);
      return { api, outboxCost: await outboxCost(ctx, fixture), conflicts: await conflicts(ctx, fixture) };
    } finally {
      await fixture.close();
      await pooledFixture?.close();
    }
  },
};

/** POST /bookings at each connection count, beside it through PgBouncer and pgbench (-M extended, and -M prepared at 8). */
async function writePath(
  { P, log, pgbench }: BenchContext,
  fixture: ApiFixture,
  pooledFixture: ApiFixture | undefined,
): Promise<NonNullable<BenchResults['api']>> {
  const api: Record<number, Rps[]> = {};
  const pooled: Record<number, Rps[]> = {};
  const bench: Record<number, Tps[]> = {};
  const prepared: Tps[] = [];
  let non201 = 0;
  let pooledNon201 = 0;
  for (let r = 0; r < P.runs; r++) {
    for (const c of P.connections) {
      const a = await apiBookings(fixture, c, P.httpSeconds);
      non201 += a.non201;
      (api[c] ??= []).push({ rps: a.rps, p99: a.p99 });
      let line = `   ${c} conn: API ${a.rps} req/s p99 ${a.p99} ms`;
      if (pooledFixture) {
        const p = await apiBookings(pooledFixture, c, P.httpSeconds);
        pooledNon201 += p.non201;
        (pooled[c] ??= []).push({ rps: p.rps, p99: p.p99 });
        line += ` | through PgBouncer ${p.rps} req/s p99 ${p.p99} ms`;
      }
      if (pgbench) {
        const b = await pgbenchBookings(fixture, P, c);
        (bench[c] ??= []).push({ tps: b.tps, p99: b.p99 });
        line += ` | pgbench ${b.tps} tps p99 ${b.p99} ms`;
        if (c === PREPARED_CONNECTIONS) {
          const bp = await pgbenchBookings(fixture, P, c, { mode: 'prepared' });
          prepared.push({ tps: bp.tps, p99: bp.p99 });
          line += ` | pgbench -M prepared ${bp.tps} tps`;
        }
      }
      log(line);
    }
  }
  return writePathResult({ P, log }, { api, pooled: pooledFixture ? pooled : undefined, bench, prepared, non201, pooledNon201 });
}

function writePathResult(
  { P, log }: Pick<BenchContext, 'P' | 'log'>,
  m: {
    api: Record<number, Rps[]>;
    pooled?: Record<number, Rps[]>;
    bench: Record<number, Tps[]>;
    prepared: Tps[];
    non201: number;
    pooledNon201: number;
  },
): NonNullable<BenchResults['api']> {
  const pooled = m.pooled;
  const result: NonNullable<BenchResults['api']> = {
    byConnections: P.connections.map((c) => {
      const a = repeatOf(m.api[c]!);
      const b = m.bench[c] ? repeatOf(m.bench[c]!) : null;
      return { connections: c, api: a, pgbench: b, ratio: b ? round(a.median.rps / b.median.tps, 3) : null };
    }),
    non201: m.non201,
    prepared: null,
    pooled: pooled
      ? {
          serverConnections: POOLED_SERVER_CONNECTIONS,
          byConnections: P.connections.map((c) => {
            const p = repeatOf(pooled[c]!);
            return { connections: c, pooled: p, ratio: round(p.median.rps / repeatOf(m.api[c]!).median.rps, 3) };
          }),
          non201: m.pooledNon201,
        }
      : null,
  };
  for (const p of result.pooled?.byConnections ?? []) log(`   through PgBouncer / direct at ${p.connections} connections: ${p.ratio}×`);
  if (m.prepared.length > 0) {
    const b = repeatOf(m.prepared);
    const a = repeatOf(m.api[PREPARED_CONNECTIONS]!);
    result.prepared = { connections: PREPARED_CONNECTIONS, pgbench: b, ratio: round(a.median.rps / b.median.tps, 3) };
    log(`   API / pgbench -M prepared at ${PREPARED_CONNECTIONS} connections: ${result.prepared.ratio}×`);
  }
  return result;
}

function apiMarkdown(r: BenchResults): string[] {
  if (!r.api) return [];
  const p = r.params;
  const L = [`## 3. The booking write path: API vs pgbench on the same SQL (${p.httpSeconds} s / ${p.pgbenchSeconds} s per run)`, ''];
  L.push(
    '| Connections | API req/s | API p99 (ms) | pgbench -M extended tps | pgbench p99 (ms) | API / pgbench -M extended |',
    '|---:|---:|---:|---:|---:|---:|',
  );
  for (const c of r.api.byConnections) {
    L.push(
      `| ${c.connections} | ${mm(c.api, 'rps')} | ${mm(c.api, 'p99', 1)} | ${c.pgbench ? mm(c.pgbench, 'tps') : '—'} | ${c.pgbench ? mm(c.pgbench, 'p99', 1) : '—'} | ${x(c.ratio)} |`,
    );
  }
  L.push('', `Answers other than 201 in the non-conflicting runs: ${r.api.non201}.`, '');
  targetLines(L, r.targets, 'API');
  if (r.api.prepared) {
    const sp = r.api.prepared;
    L.push(
      `The target's peer: pgbench \`-M prepared\` at ${sp.connections} connections, ${mm(sp.pgbench, 'tps')} tps; API / pgbench ${x(sp.ratio)}. ` +
        "The API's booking statements are named, parsed once per connection: that is `-M prepared`'s protocol, while " +
        '`-M extended` (the table above) parses every statement every time.',
      '',
    );
  }
  return L;
}
