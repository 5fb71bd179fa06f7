import type { ApiFixture } from '../api.ts';
import { pgbenchBookings } from '../api-pgbench.ts';
import { mm, n, x } from '../lib/markdown.ts';
import { repeatOf, round } from '../lib/stats.ts';
import type { BenchContext } from '../context.ts';
import type { BenchResults } from '../results.ts';

type Tps = { tps: number; p99: number };

/**
 * What the outbox costs a booking (part of the api section): pgbench runs the booking transaction
 * with and without the outbox insert + pg_notify, and two diagnostic variants. Null without pgbench.
 */
export async function outboxCost({ P, log, pgbench }: BenchContext, fixture: ApiFixture): Promise<BenchResults['outboxCost']> {
  if (!pgbench) return null;
  const runs = { w: [] as Tps[], wo: [] as Tps[], nn: [] as Tps[], na: [] as Tps[] };
  const c = P.outboxCostClients;
  for (let r = 0; r < P.runs; r++) {
    const w = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, undefined, P.pgbenchTransactions);
    const wo = await pgbenchBookings(fixture, c, P.pgbenchSeconds, false, undefined, P.pgbenchTransactions);
    // Diagnostics: which part of the outbox costs what (the row, or the NOTIFY at COMMIT).
    const nn = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, 'no-notify', P.pgbenchTransactions);
    const na = await pgbenchBookings(fixture, c, P.pgbenchSeconds, true, 'in-transaction', P.pgbenchTransactions);
    runs.w.push({ tps: w.tps, p99: w.p99 });
    runs.wo.push({ tps: wo.tps, p99: wo.p99 });
    runs.nn.push({ tps: nn.tps, p99: nn.p99 });
    runs.na.push({ tps: na.tps, p99: na.p99 });
    log(`   outbox cost: ${w.tps} tps with, ${wo.tps} without; row without notify ${nn.tps}, notify inside the transaction ${na.tps}`);
  }
  const w = repeatOf(runs.w);
  const wo = repeatOf(runs.wo);
  const ratio = round(w.median.tps / wo.median.tps, 3);
  const nn = repeatOf(runs.nn);
  const na = repeatOf(runs.na);
  return {
    clients: c,
    withOutbox: w,
    withoutOutbox: wo,
    ratio,
    costPercent: round(100 * (1 - ratio), 1),
    diagnostics: {
      rowWithoutNotify: nn,
      notifyInTransaction: na,
      rowWithoutNotifyCostPercent: round(100 * (1 - nn.median.tps / wo.median.tps), 1),
      notifyInTransactionCostPercent: round(100 * (1 - na.median.tps / wo.median.tps), 1),
    },
  };
}

/** Always written: a run without the figures says why. */
export function outboxCostMarkdown(r: BenchResults): string[] {
  const L = ['## 4. What the outbox costs a booking (pgbench, same transaction with and without the outbox insert + pg_notify)', ''];
  if (!r.outboxCost) return [...L, 'Not measured (pgbench missing or the section failed).', ''];
  const o = r.outboxCost;
  const d = o.diagnostics;
  L.push('| Clients | with outbox (tps) | without (tps) | with / without | cost |', '|---:|---:|---:|---:|---:|');
  L.push(`| ${o.clients} | ${mm(o.withOutbox, 'tps')} | ${mm(o.withoutOutbox, 'tps')} | ${x(o.ratio)} | ${n(o.costPercent, 1)} % |`, '');
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
