import pg from 'pg';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import * as schema from './schema.ts';

export type Db = NodePgDatabase<typeof schema>;

export interface Database {
  pool: pg.Pool;
  db: Db;
  close(): Promise<void>;
}

/** Dates of a stay stay plain 'YYYY-MM-DD' strings: never let pg turn a `date` into a local-time Date. */
pg.types.setTypeParser(pg.types.builtins.DATE, (v) => v);

export interface PoolOptions {
  max?: number;
  /** statement_timeout for every connection of this pool, in ms (0 = none). */
  statementTimeoutMs?: number;
  applicationName?: string;
}

export function createPool(connectionString: string, opts: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: opts.max ?? 10,
    application_name: opts.applicationName ?? 'stayhub',
    statement_timeout: opts.statementTimeoutMs || undefined,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
  });
  return guardPool(pool);
}

/**
 * The error listeners every pool of ours needs (createPool's, and the worker's claim connection,
 * src/outbox/claim-connection.ts). Returns the pool.
 */
export function guardPool(pool: pg.Pool): pg.Pool {
  // An idle client that loses its connection (database restart) emits 'error' on the pool; without
  // a listener that would crash the process. The pool drops the client and makes a new one.
  pool.on('error', () => {});
  // A client checked out of the pool has no 'error' listener (pg-pool removes its own while the
  // client is lent out). If the server ends the connection mid-transaction (restart,
  // pg_terminate_backend), pg delivers the error to the running query AND emits 'error' on the
  // client: unheard, that event crashes the process. Found by the chaos run. The query's own
  // rejection still reaches the caller, and the pool discards the broken client on release.
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

export function createDatabase(connectionString: string, opts: PoolOptions = {}): Database {
  const pool = createPool(connectionString, opts);
  const db = drizzle(pool, { schema });
  let closed: Promise<void> | undefined;
  return {
    pool,
    db,
    close: () => (closed ??= pool.end()),
  };
}

/** host:port/database of a connection URL, without credentials, for logs and error messages. */
export function describeDb(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return '(unparseable DATABASE_URL)';
  }
}
