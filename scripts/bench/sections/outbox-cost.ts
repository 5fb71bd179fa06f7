import type { ApiFixture } from '../api.ts';
import { pgbenchBookings, type OutboxVariant } from '../api-pgbench.ts';
import type { PgbenchMode } from '../lib/pgbench.ts';
import { mm, n, x } from '../lib/markdown.ts';
import { interleaved, round } from '../lib/stats.ts';
import type { BenchContext } from '../context.ts';
import type { BenchResults } from '../results.ts';

type Tps = { tps: number; p99: number };

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
export async function outboxCost({ P, log, pgbench }: BenchContext, fixture: ApiFixture) {
  if (!pgbench) return null;
  const c = P.outboxCostClients;
  const variant =
    (v: OutboxVariant, mode: PgbenchMode = 'extended') =>
    async (): Promise<Tps> => {
      const { tps, p99 } = await pgbenchBookings(fixture, P, c, { variant: v, mode });
      return { tps, p99 };
    };
  const m = await interleaved<Record<'w' | 'wo' | 'nn' | 'na' | 'wp' | 'wop', Tps>>(
    P.runs,
    {
      w: variant('notify-after-commit'),
      wo: variant('none'),
      nn: variant('no-notify'),
      na: variant('in-transaction'),
      wp: variant('notify-after-commit', 'prepared'),
      wop: variant('none', 'prepared'),
    },
    { after: (k, t) => log(`   outbox cost, ${LABELS[k]}: ${t.tps} tps`) },
  );
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
    diagnostics: {
      rowWithoutNotify: m.nn,
      notifyInTransaction: m.na,
      rowWithoutNotifyCostPercent: costPercent(m.nn),
      notifyInTransactionCostPercent: costPercent(m.na),
    },
  };
}

const LABELS = {
  w: 'with',
  wo: 'without',
  nn: 'row without notify',
  na: 'notify inside the transaction',
  wp: 'with, prepared',
  wop: 'without, prepared',
};

/** Always written: a run without the figures says why. */
export function outboxCostMarkdown(r: BenchResults): string[] {
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
  L.push('');
  L.push('Where the cost is (same clients, diagnostic variants of the transaction):', '');
  L.push('| Variant | tps | cost vs no outbox |', '|---|---:|---:|');
  L.push(
    `| outbox row, pg_notify right after COMMIT (what the service does under load) | ${n(o.withOutbox.median.tps)} | ${n(o.costPercent, 1)} % |`,
  );
  L.push(`| outbox row, no pg_notify | ${n(d.rowWithoutNotify.median.tps)} | ${n(d.rowWithoutNotifyCostPercent, 1)} % |`);
  L.push(
    `| outbox row, pg_notify inside the transaction (the first design) | ${n(d.notifyInTransaction.median.tps)} | ${n(d.notifyInTransactionCostPercent, 1)} % |`,
    '',
  );
  return L;
}
