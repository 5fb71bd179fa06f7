import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { guardPool, type Database } from './client.ts';
import { sendUnnamedStatements, type Pooler } from './pooler.ts';
import * as schema from './schema.ts';

export interface HealthDatabaseOptions {
  /** What stands between this pool and PostgreSQL (DATABASE_POOLER). */
  pooler?: Pooler;
  /** The wait for a connection, and for a statement's answer (HEALTH_DB_TIMEOUT_MS). */
  timeoutMs: number;
  applicationName?: string;
}

/**
 * Three connections: one /metrics scrape reads three things at once (the outbox's stats, its
 * partitions, the webhooks'); /health and the load-shedding outbox sample are one query each.
 */
const MAX = 3;

/**
 * The small pool that /health, /metrics and admission control's outbox sample query through,
 * apart from the pool requests use. Under overload the main pool is full and its queue seconds
 * long: on it, /health waited its turn and said `db: down` while the database answered everyone
 * else, and /metrics took 17 s (ADR 0041). Here they wait for nobody but each other, and a
 * database that does not answer within `timeoutMs` is reported at once rather than waited for.
 */
export function createHealthDatabase(connectionString: string, opts: HealthDatabaseOptions): Database {
  const pooler = opts.pooler ?? 'none';
  const pool = new pg.Pool({
    connectionString,
    max: MAX,
    application_name: opts.applicationName ?? 'stayhub-api-health',
    connectionTimeoutMillis: opts.timeoutMs,
    // The client's own timer bounds the answer whatever is in between; the query that ran out
    // takes its connection with it (pg-pool discards a client released with an error).
    query_timeout: opts.timeoutMs,
    // Straight to PostgreSQL the server stops the statement too; a pooler refuses startup
    // parameters (src/db/pooler.ts), and there the client's timer alone has to do.
    ...(pooler === 'none' ? { statement_timeout: opts.timeoutMs } : {}),
    idleTimeoutMillis: 30_000,
  });
  if (pooler === 'transaction') sendUnnamedStatements(pool);
  guardPool(pool);
  const db = drizzle(pool, { schema });
  let closed: Promise<void> | undefined;
  return { pool, db, pooler, close: () => (closed ??= pool.end()) };
}
