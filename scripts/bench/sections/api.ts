import { apiBookings, apiConflicts, POOLED_SERVER_CONNECTIONS, startApi, startPooledApi, type ApiFixture } from '../api.ts';
import { pgbenchBookings, type OutboxVariant } from '../api-pgbench.ts';
import type { PgbenchMode } from '../lib/pgbench.ts';
import { mm, n, targetLines, x } from '../lib/markdown.ts';
import { measureEach, repeat, repeatOf, round, runsOf } from '../lib/stats.ts';
import { PREPARED_CONNECTIONS, type BenchContext, type ReportPart, type PartOf } from '../context.ts';

type Rps = { rps: number; p99: number };
type Tps = { tps: number; p99: number };

// Declared, not inferred: comparing the three parts' types would read apiSection's type while it is inferred.
const API_PARTS: ReportPart[] = [
  { place: 3, render: apiMarkdown },
  { place: 4, render: outboxCostMarkdown },
  { place: 7, render: conflictsMarkdown },
];

/**
 * The booking write path: POST /bookings against pgbench running the same SQL, directly and
 * through PgBouncer; then, on the same API, what the outbox costs a booking and bookings of the
 * same dates in contention.
 */
export const apiSection = {
  name: 'api',
  markdown: API_PARTS,
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
async function writePath({ P, log, pgbench }: BenchContext, fixture: ApiFixture, pooledFixture: ApiFixture | undefined) {
  const runs = new Map(P.connections.map((c) => [c, { api: [] as Rps[], pooled: [] as Rps[], pgbench: [] as Tps[] }]));
  const prepared: Tps[] = [];
  const non201 = { direct: 0, pooled: 0 };
  const post = async (f: ApiFixture, c: number, into: Rps[], which: keyof typeof non201) => {
    const a = await apiBookings(f, c, P.httpSeconds);
    non201[which] += a.non201;
    into.push({ rps: a.rps, p99: a.p99 });
    return `${a.rps} req/s p99 ${a.p99} ms`;
  };
  for (let r = 0; r < P.runs; r++) {
    for (const c of P.connections) {
      const m = runs.get(c)!;
      let line = `   ${c} conn: API ${await post(fixture, c, m.api, 'direct')}`;
      if (pooledFixture) line += ` | through PgBouncer ${await post(pooledFixture, c, m.pooled, 'pooled')}`;
      if (pgbench) {
        const b = await pgbenchBookings(fixture, P, c);
        m.pgbench.push({ tps: b.tps, p99: b.p99 });
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
  const api = (c: number) => repeatOf(runs.get(c)!.api);
  const byConnections = P.connections.map((c) => {
    const b = runs.get(c)!.pgbench.length > 0 ? repeatOf(runs.get(c)!.pgbench) : null;
    return { connections: c, api: api(c), pgbench: b, ratio: b ? round(api(c).median.rps / b.median.tps, 3) : null };
  });
  const pooled = pooledFixture
    ? {
        serverConnections: POOLED_SERVER_CONNECTIONS,
        byConnections: P.connections.map((c) => {
          const p = repeatOf(runs.get(c)!.pooled);
          return { connections: c, pooled: p, ratio: round(p.median.rps / api(c).median.rps, 3) };
        }),
        non201: non201.pooled,
      }
    : null;
  for (const p of pooled?.byConnections ?? []) log(`   through PgBouncer / direct at ${p.connections} connections: ${p.ratio}×`);
  const b = prepared.length > 0 ? repeatOf(prepared) : null;
  const preparedResult = b && {
    connections: PREPARED_CONNECTIONS,
    pgbench: b,
    ratio: round(api(PREPARED_CONNECTIONS).median.rps / b.median.tps, 3),
  };
  if (preparedResult) log(`   API / pgbench -M prepared at ${PREPARED_CONNECTIONS} connections: ${preparedResult.ratio}×`);
  return { byConnections, non201: non201.direct, prepared: preparedResult, pooled };
}

function apiMarkdown(r: PartOf<typeof apiSection>): string[] {
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

/**
 * What the outbox costs a booking (part of the api section): pgbench runs the booking transaction
 * with and without the outbox insert + pg_notify, and two diagnostic variants (which part of the
 * outbox costs what: the row, or the NOTIFY at COMMIT). Null without pgbench.
 *
 * Each statement is parsed and planned every time (pgbench -M extended), as the API sends it
 * behind a transaction-mode pooler; the with/without pair runs again prepared (-M prepared), as
 * the API sends it straight to PostgreSQL (src/db/prepared.ts: named, planned once a connection).
 * Planning the outbox insert into a partitioned table is part of the first figure, not the second.
 */
async function outboxCost({ P, log, pgbench }: BenchContext, fixture: ApiFixture) {
  if (!pgbench) return null;
  const c = P.outboxCostClients;
  const variant =
    (v: OutboxVariant, mode: PgbenchMode = 'extended') =>
    async (): Promise<Tps> => {
      const { tps, p99 } = await pgbenchBookings(fixture, P, c, { variant: v, mode });
      return { tps, p99 };
    };
  const configs = [
    { key: 'w', label: 'outbox cost, with', measure: variant('notify-after-commit') },
    { key: 'wo', label: 'outbox cost, without', measure: variant('none') },
    { key: 'nn', label: 'outbox cost, row without notify', measure: variant('no-notify') },
    { key: 'na', label: 'outbox cost, notify inside the transaction', measure: variant('in-transaction') },
    { key: 'gt', label: 'outbox cost, row with a turn given', measure: variant('given-turn') },
    { key: 'wm', label: 'outbox cost, a WAL message instead of a row', measure: variant('wal-message') },
    { key: 'wp', label: 'outbox cost, with, prepared', measure: variant('notify-after-commit', 'prepared') },
    { key: 'wop', label: 'outbox cost, without, prepared', measure: variant('none', 'prepared') },
    { key: 'wmp', label: 'outbox cost, a WAL message instead of a row, prepared', measure: variant('wal-message', 'prepared') },
  ] as const;
  const m = runsOf(await measureEach(P.runs, configs, { log, show: (t) => `${t.tps} tps` }));
  const ratio = round(m.w.median.tps / m.wo.median.tps, 3);
  const costPercent = (v: typeof m.w) => round(100 * (1 - v.median.tps / m.wo.median.tps), 1);
  const preparedRatio = round(m.wp.median.tps / m.wop.median.tps, 3);
  return {
    clients: c,
    withOutbox: m.w,
    withoutOutbox: m.wo,
    ratio,
    costPercent: round(100 * (1 - ratio), 1),
    prepared: { withOutbox: m.wp, withoutOutbox: m.wop, ratio: preparedRatio, costPercent: round(100 * (1 - preparedRatio), 1) },
    /** OUTBOX_WRITES=wal: the same transaction with its message in the WAL instead of a row. */
    walWrites: {
      extended: m.wm,
      extendedCostPercent: costPercent(m.wm),
      prepared: m.wmp,
      preparedCostPercent: round(100 * (1 - m.wmp.median.tps / m.wop.median.tps), 1),
    },
    diagnostics: {
      rowWithoutNotify: m.nn,
      notifyInTransaction: m.na,
      rowWithGivenTurn: m.gt,
      rowWithoutNotifyCostPercent: costPercent(m.nn),
      rowWithGivenTurnCostPercent: costPercent(m.gt),
      notifyInTransactionCostPercent: costPercent(m.na),
    },
  };
}

/** Always written: a run without the figures says why. */
function outboxCostMarkdown(r: PartOf<typeof apiSection>): string[] {
  const L = ['## 4. What the outbox costs a booking (pgbench, same transaction with and without the outbox insert + pg_notify)', ''];
  if (!r.outboxCost) return [...L, 'Not measured (pgbench missing or the section failed).', ''];
  const o = r.outboxCost;
  const d = o.diagnostics;
  L.push('| Statements | Clients | with outbox (tps) | without (tps) | with / without | cost |', '|---|---:|---:|---:|---:|---:|');
  L.push(
    `| planned each time (-M extended: the API behind a transaction pooler) | ${o.clients} | ${mm(o.withOutbox, 'tps')} | ${mm(o.withoutOutbox, 'tps')} | ${x(o.ratio)} | ${n(o.costPercent, 1)} % |`,
  );
  if (o.prepared) {
    const p = o.prepared;
    L.push(
      `| prepared (-M prepared: the API straight to PostgreSQL) | ${o.clients} | ${mm(p.withOutbox, 'tps')} | ${mm(p.withoutOutbox, 'tps')} | ${x(p.ratio)} | ${n(p.costPercent, 1)} % |`,
    );
  }
  const w = o.walWrites;
  L.push(
    `| planned each time, OUTBOX_WRITES=wal: the message in the WAL, no row (ADR 0056) | ${o.clients} | ${mm(w.extended, 'tps')} | ${mm(o.withoutOutbox, 'tps')} | ${x(round(w.extended.median.tps / o.withoutOutbox.median.tps, 3))} | ${n(w.extendedCostPercent, 1)} % |`,
  );
  if (o.prepared) {
    L.push(
      `| prepared, OUTBOX_WRITES=wal | ${o.clients} | ${mm(w.prepared, 'tps')} | ${mm(o.prepared.withoutOutbox, 'tps')} | ${x(round(w.prepared.median.tps / o.prepared.withoutOutbox.median.tps, 3))} | ${n(w.preparedCostPercent, 1)} % |`,
    );
  }
  L.push('');
  L.push('Where the cost is (same clients, diagnostic variants of the transaction):', '');
  L.push('| Variant | tps | cost vs no outbox |', '|---|---:|---:|');
  L.push(
    `| outbox row, pg_notify right after COMMIT (what the service does under load) | ${n(o.withOutbox.median.tps)} | ${n(o.costPercent, 1)} % |`,
  );
  L.push(`| outbox row, no pg_notify | ${n(d.rowWithoutNotify.median.tps)} | ${n(d.rowWithoutNotifyCostPercent, 1)} % |`);
  L.push(
    `| outbox row, no pg_notify, a constant for its turn (the row above less outbox_turn's three probes) | ${n(d.rowWithGivenTurn.median.tps)} | ${n(d.rowWithGivenTurnCostPercent, 1)} % |`,
  );
  L.push(
    `| outbox row, pg_notify inside the transaction (the first design) | ${n(d.notifyInTransaction.median.tps)} | ${n(d.notifyInTransactionCostPercent, 1)} % |`,
    '',
  );
  return L;
}

/** Bookings of the same dates in contention (part of the api section): one winner a round, the rest 409. */
async function conflicts({ P, log }: BenchContext, fixture: ApiFixture) {
  // Every figure of a run but the clients' errors (requests that got no answer).
  const runs = await repeat(P.runs, async () => {
    const { errors: _, ...c } = await apiConflicts(fixture, P.conflictConnections, P.httpSeconds);
    log(
      `   conflicts: ${c.rps} req/s, ${c.rounds} rounds, ${c.share409} % 409, ${c.created201} × 201 (${c.bookingsKept} kept, at most ${c.maxWinnersPerRound} a round), ${c.server5xx} × 5xx, ${c.other} other`,
    );
    return c;
  });
  return {
    connections: P.conflictConnections,
    runs,
    expectedShare409: round(100 * (1 - 1 / P.conflictConnections), 2),
  };
}

function conflictsMarkdown(r: PartOf<typeof apiSection>): string[] {
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
