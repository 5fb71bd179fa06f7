import { setTimeout as sleep } from 'node:timers/promises';
import type { FaultEffect, InjectorDeps, PlannedFault, Queryable } from './types.ts';

async function postmasterStart(admin: Queryable): Promise<string | null> {
  // The pool's connections died with the old server: the first attempts may fail.
  for (let i = 0; i < 50; i++) {
    try {
      const { rows } = await admin.query<{ t: string }>('select pg_postmaster_start_time()::text as t');
      return rows[0]?.t ?? null;
    } catch {
      await sleep(100);
    }
  }
  return null;
}

/** Fault "pg-restart": PostgreSQL fast shutdown and start; the evidence is a changed postmaster start time. */
export async function pgRestart(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  const before = await postmasterStart(d.admin);
  const t0 = Date.now();
  await d.postgres.stop(); // fast shutdown: SIGINT to the postmaster
  const stopped = Date.now() - t0;
  await sleep(f.downMs);
  await d.postgres.start();
  const after = await postmasterStart(d.admin);
  const changed = before !== null && after !== null && before !== after;
  return {
    detail: `Postgres fast shutdown (${stopped} ms) and start; down ${Date.now() - t0} ms in all; postmaster started ${before} → ${after}`,
    evidence: changed ? `pg_postmaster_start_time() ${before} → ${after}` : null,
  };
}
