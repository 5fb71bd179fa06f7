import type pg from 'pg';
import type { Db } from './client.ts';
import { sendsUnnamedStatements } from './pooler.ts';
import type { Tx } from './transaction.ts';

/*
 * The few hot statements (the session lookup on every authenticated request, the booking
 * transaction) as plain parameterised SQL, built once at import and sent as NAMED statements.
 *
 * Why not drizzle for these: drizzle builds a query's SQL text and its result mapping afresh on
 * every call; on the booking path that was a large share of the API's CPU (docs/performance.md,
 * the booking write path). A named statement also lets PostgreSQL parse and plan it once per
 * connection instead of once per request (node-postgres keeps track of which connection has
 * prepared which name). Everything else
 * keeps drizzle. Columns are always listed (never `*`), so a migration that adds a column cannot
 * change a prepared statement's result type under a running process.
 */
export interface Statement {
  /** Unique per SQL text: node-postgres refuses to reuse a name for another text. */
  readonly name: string;
  readonly text: string;
}

export const statement = (name: string, text: string): Statement => ({ name, text });

export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

/** Sends `s` as a named statement (unnamed behind a transaction-mode pooler) and returns its rows. */
export async function run<R extends pg.QueryResultRow>(q: Queryable, s: Statement, values: unknown[]): Promise<R[]> {
  return (await execute<R>(q, s, values)).rows;
}

/**
 * Sends `s` as a named statement (unnamed behind a transaction-mode pooler) and returns the whole
 * result (rowCount for UPDATE and DELETE).
 */
export function execute<R extends pg.QueryResultRow>(q: Queryable, s: Statement, values: unknown[]): Promise<pg.QueryResult<R>> {
  if (sendsUnnamedStatements(q)) return q.query<R>({ text: s.text, values });
  return q.query<R>({ name: s.name, text: s.text, values });
}

/** The pool behind a drizzle database (drizzle() sets `$client`; our `Db` type leaves it out). */
export function poolOf(db: Db): pg.Pool {
  const pool = (db as { $client?: pg.Pool }).$client;
  if (!pool || typeof pool.query !== 'function') throw new Error('poolOf: this drizzle database has no pg pool');
  return pool;
}

/**
 * The connection a drizzle transaction runs on, so a raw statement joins that transaction.
 * drizzle (0.45, node-postgres) keeps it as `tx.session.client`; checked, so a drizzle upgrade
 * that moves it fails loudly here instead of running the statement outside the transaction.
 */
export function clientOf(tx: Tx): pg.PoolClient {
  const client = (tx as unknown as { session?: { client?: unknown } }).session?.client as pg.PoolClient | undefined;
  if (!client || typeof client.query !== 'function' || typeof (client as { release?: unknown }).release !== 'function') {
    throw new Error('clientOf: this drizzle transaction does not expose its pg client (drizzle changed?)');
  }
  return client;
}
