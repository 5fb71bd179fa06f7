import type pg from 'pg';

/**
 * What stands between a process and PostgreSQL (DATABASE_POOLER), and so what its connections
 * may rely on. docs/adr/0024-api-behind-a-transaction-mode-pooler.md has the measurements.
 *
 * - `none`: PostgreSQL itself. Settings travel as startup parameters, the hot statements are
 *   named (parsed and planned once per connection): the fast path.
 * - `session`: a session-mode pool (PgBouncer `pool_mode = session`). A client keeps one server
 *   connection for as long as it is connected, so named statements and SET hold; but PgBouncer
 *   refuses startup parameters other than a few (08P01 "unsupported startup parameter"), so
 *   settings go by SET once the connection is open.
 * - `transaction`: a transaction-mode pool (PgBouncer `pool_mode = transaction`, what managed
 *   PostgreSQL hands out by default). Consecutive statements may run on different server
 *   connections: a named statement prepared on one is missing on the next ("does not exist") or
 *   already there ("already exists"), and a session-level SET lands on someone else's connection.
 *   So no named statement, no startup parameter, and settings by SET LOCAL inside the transaction
 *   they govern.
 *
 * application_name is the one startup parameter sent in every mode: PgBouncer accepts it and
 * passes it on to the server connection it hands out.
 */
export const POOLERS = ['none', 'session', 'transaction'] as const;
export type Pooler = (typeof POOLERS)[number];

/** The one-line refusal of a process whose own statements need a session (the worker's claim). */
export function refuseTransactionPooler(process: string, why: string): string {
  return (
    `DATABASE_POOLER=transaction: ${process} cannot run through a transaction-mode pooler (${why}). ` +
    'Connect it to PostgreSQL directly (DATABASE_POOLER=none) or through a session-mode pool (DATABASE_POOLER=session): docs/scaling.md'
  );
}

/**
 * Pools behind a transaction-mode pooler, and the connections they opened: there a named
 * statement prepared on one server connection is missing, or already present, on the next one the
 * pooler hands out (PgBouncer 1.18 does not track them), so `execute` (src/db/prepared.ts) sends
 * the same text unnamed: parsed and planned on every execution, but valid wherever it lands.
 */
const unnamed = new WeakSet<object>();

/** From now on, statements sent through `pool` or a connection it opens go unnamed. */
export function sendUnnamedStatements(pool: pg.Pool): void {
  unnamed.add(pool);
  pool.on('connect', (client) => unnamed.add(client));
}

/** Whether `q` (a pool or a connection) sends its statements unnamed. */
export function sendsUnnamedStatements(q: object): boolean {
  return unnamed.has(q);
}
