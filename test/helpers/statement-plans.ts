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

/**
 * The pages an EXPLAIN (ANALYZE, BUFFERS) says its statement read, the whole statement's (its first
 * Buffers line), with the plan's text; the statement must have returned one row.
 */
export async function pagesReadForOne(plan: Promise<string>): Promise<{ text: string; pages: number }> {
  const text = await plan;
  if (!/rows=1(\.00)? loops=1\)$/.test(text.split('\n')[0]!)) throw new Error(`expected one row:\n${text}`);
  const m = /Buffers: shared hit=(\d+)(?: read=(\d+))?/.exec(text);
  if (!m) throw new Error(`no Buffers line:\n${text}`);
  return { text, pages: Number(m[1]) + Number(m[2] ?? 0) };
}
