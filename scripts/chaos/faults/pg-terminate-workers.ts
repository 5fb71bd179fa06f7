import { setTimeout as sleep } from 'node:timers/promises';
import type { FaultEffect, InjectorDeps, PlannedFault } from './types.ts';

/**
 * Fault "pg-terminate-workers": pg_terminate_backend on the workers' connections; the evidence is
 * backends that really ended.
 */
export async function pgTerminateWorkers(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  // Right after a restart or a worker kill there may be no worker connection yet: wait
  // (bounded) for one, so the fault severs live connections rather than nothing.
  const until = Date.now() + (d.connectionWaitMs ?? 10_000);
  for (;;) {
    const { rows: live } = await d.admin
      .query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where application_name like 'stayhub-worker%'`)
      .catch(() => ({ rows: [{ n: 0 }] }));
    if ((live[0]?.n ?? 0) > 0 || Date.now() > until) break;
    await sleep(100);
  }
  const { rows } = await d.admin.query<{ pid: number; name: string }>(
    // Materialized first, so pg_terminate_backend is only ever called on the workers' backends.
    `with w as materialized (
         select pid, application_name from pg_stat_activity
          where application_name like 'stayhub-worker%' and pid <> pg_backend_pid())
       select pid, application_name as name from w where pg_terminate_backend(pid)`,
  );
  // pg_terminate_backend only sends the signal: count the backends that are really gone.
  const pids = rows.map((r) => r.pid);
  let left = pids;
  const deadline = Date.now() + (d.backendGoneTimeoutMs ?? 3_000);
  while (left.length && Date.now() < deadline) {
    const { rows: alive } = await d.admin.query<{ pid: number }>('select pid from pg_stat_activity where pid = any($1::int[])', [left]);
    left = alive.map((r) => r.pid);
    if (left.length) await sleep(50);
  }
  const ended = pids.length - left.length;
  const names = [...new Set(rows.map((r) => r.name))].join(',') || 'none';
  return {
    detail: `pg_terminate_backend on ${pids.length} worker connection(s) (${names}); ${ended} ended`,
    evidence: ended > 0 ? `${ended} backend(s) ended: pids ${pids.filter((p) => !left.includes(p)).join(', ')}` : null,
  };
}
