import pg from 'pg';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import * as schema from './schema.ts';
import { watchPool } from './pool-load.ts';
import { sendUnnamedStatements, type Pooler } from './pooler.ts';

export type Db = NodePgDatabase<typeof schema>;

export interface Database {
  pool: pg.Pool;
  db: Db;
  /** What stands between this pool and PostgreSQL (src/db/pooler.ts). */
  pooler: Pooler;
  close(): Promise<void>;
}

/** Dates of a stay stay plain 'YYYY-MM-DD' strings: never let pg turn a `date` into a local-time Date. */
pg.types.setTypeParser(pg.types.builtins.DATE, (v) => v);

export interface PoolOptions {
  max?: number;
  applicationName?: string;
  /** What stands between this pool and PostgreSQL (DATABASE_POOLER); `none` by default. */
  pooler?: Pooler;
  /** How long a request waits for a connection before it fails (5 s by default). */
  connectionTimeoutMs?: number;
}

/**
 * A pool that sends no startup parameter but application_name (which PgBouncer accepts), so it
 * can go through a pooler in any mode; behind a transaction-mode pooler its statements go
 * unnamed (src/db/prepared.ts).
 */
export function createPool(connectionString: string, opts: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: opts.max ?? 10,
    application_name: opts.applicationName ?? 'stayhub',
    connectionTimeoutMillis: opts.connectionTimeoutMs ?? 5_000,
    idleTimeoutMillis: 30_000,
  });
  if (opts.pooler === 'transaction') sendUnnamedStatements(pool);
  // Followed for admission control and to tell a busy pool from an unreachable database (pool-load.ts).
  return watchPool(guardPool(pool));
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
    pooler: opts.pooler ?? 'none',
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
