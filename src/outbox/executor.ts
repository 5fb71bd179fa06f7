import type pg from 'pg';
import type { Db } from '../db/client.ts';
import { clientOf, execute as executeStatement, poolOf, statement, type Queryable, type Statement } from '../db/prepared.ts';
import { sendsUnnamedStatements } from '../db/pooler.ts';
import type { Tx } from '../db/transaction.ts';

/*
 * What the outbox sends its SQL on, and the one place it meets drizzle.
 *
 * Every statement of the outbox is plain parameterised SQL sent by `run` (its rows) or `execute`
 * (the whole result: rowCount) on an Executor: a node-postgres pool, or the connection a
 * transaction runs on. So the outbox's types know no drizzle schema, and its statements are sent
 * the one way src/db/prepared.ts sends them: named (parsed and planned once per connection), or
 * unnamed behind a transaction-mode pooler, which cannot keep a statement between transactions.
 *
 * The application holds drizzle handles (its `Db`, a service's `Tx`): the functions of
 * src/outbox/index.ts that take one turn it into an Executor once, with `executorOf`, and hand that
 * to the rest.
 */
export type Executor = Queryable;

export { statement, type Statement };

/** Sends `s` on `q` (src/db/prepared.ts: named, or unnamed behind a transaction-mode pooler) and returns its rows. */
export async function run<R extends pg.QueryResultRow>(q: Executor, s: Statement, values: unknown[]): Promise<R[]> {
  return (await execute<R>(q, s, values)).rows;
}

/** Sends `s` on `q` and returns the whole result (rowCount for UPDATE and DELETE). */
export function execute<R extends pg.QueryResultRow>(q: Executor, s: Statement, values: unknown[]): Promise<pg.QueryResult<R>> {
  // An unnamed statement without parameters goes as the plain simple query it is: the query text alone.
  if (s.name === '' && values.length === 0) return q.query<R>(s.text);
  return executeStatement<R>(q, s, values);
}

/**
 * `run` with each row as an array of its columns, in the statement's order: no object per row, for
 * a statement whose rows are read once each (the claim). Named or unnamed as `execute` sends it.
 */
export async function runArrays(q: Executor, s: Statement, values: unknown[]): Promise<unknown[][]> {
  const query = sendsUnnamedStatements(q)
    ? { text: s.text, values, rowMode: 'array' as const }
    : { name: s.name, text: s.text, values, rowMode: 'array' as const };
  return (await q.query<unknown[]>(query)).rows;
}

/** The pool behind the application's drizzle database, or the connection its transaction runs on. */
export function executorOf(db: Db): pg.Pool;
export function executorOf(tx: Tx): pg.PoolClient;
export function executorOf(dbOrTx: Db | Tx): pg.Pool | pg.PoolClient {
  // drizzle() gives a database its pool as `$client`; a transaction has none, only its session's client.
  return '$client' in dbOrTx ? poolOf(dbOrTx as Db) : clientOf(dbOrTx as Tx);
}

/**
 * A statement whose text is made at call time and names something of its own (a partition in
 * DDL, an identifier in LISTEN), or that PostgreSQL runs only outside the extended protocol
 * (VACUUM, several statements in one string). It is sent unnamed: no connection keeps a prepared
 * statement per text; without parameters it goes as a simple query (`execute` above).
 */
export function unnamed(text: string): Statement {
  // An empty name is node-postgres's unnamed statement (pg's Query prepares only a non-empty name).
  return statement('', text);
}

const BEGIN = unnamed('begin');
const COMMIT = unnamed('commit');
const ROLLBACK = unnamed('rollback');

/**
 * Runs `work` in one transaction on a connection of `pool`, as drizzle's `transaction` does:
 * COMMIT when it returns, ROLLBACK when it throws (and the error goes on), the connection back
 * to the pool either way.
 */
export async function inTransaction<T>(pool: Pick<pg.Pool, 'connect'>, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await execute(client, BEGIN, []);
    try {
      const result = await work(client);
      await execute(client, COMMIT, []);
      return result;
    } catch (err) {
      await execute(client, ROLLBACK, []);
      throw err;
    }
  } finally {
    client.release();
  }
}
