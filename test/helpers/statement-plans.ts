import { createDatabase, type Database } from '../../src/db/client.ts';

/**
 * Runs `work` on the database at `url` through a connection whose statements' plans come back as
 * notices (auto_explain, loaded for that session only), with sequential scans forbidden: a plan
 * that still has one had no index to use. Returns the plans of the statements whose text matches
 * `naming` (the catalogue's own lookups left out).
 */
export async function plansOf(url: string, naming: RegExp, work: (db: Database) => Promise<unknown>): Promise<string[]> {
  const u = new URL(url);
  u.searchParams.set(
    'options',
    '-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 -c auto_explain.log_level=notice -c enable_seqscan=off',
  );
  const db = createDatabase(u.toString(), { max: 1 });
  const plans: string[] = [];
  db.pool.on('connect', (c) => c.on('notice', (n) => plans.push(n.message ?? '')));
  try {
    await work(db);
  } finally {
    await db.close();
  }
  return plans.filter((p) => naming.test(p) && !/pg_inherits|pg_constraint/.test(p));
}

/** The plans of the statements that name the outbox. */
export const outboxPlansOf = (url: string, work: (db: Database) => Promise<unknown>) => plansOf(url, /\boutbox/, work);
