import type { PgTransaction } from 'drizzle-orm/pg-core';
import type { NodePgQueryResultHKT } from 'drizzle-orm/node-postgres';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import type * as schema from './schema.ts';
import type { Db } from './client.ts';
import { isRetryableTransactionError } from './pg-errors.ts';

/**
 * A transaction handle. Repositories and `enqueue` take one of these, never the pool, so a write
 * that must be atomic with others cannot be made outside the caller's transaction.
 */
export type Tx = PgTransaction<NodePgQueryResultHKT, typeof schema, ExtractTablesWithRelations<typeof schema>>;

/**
 * Runs `work` in one transaction and commits it. A deadlock (40P01) or serialization failure
 * (40001) rolls back everything `work` did, so it is safe to run again from the start: it is
 * retried a few times before it surfaces. Any other error rolls back and is rethrown.
 */
export async function withTransaction<T>(db: Db, work: (tx: Tx) => Promise<T>, attempts = 5): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction(work);
    } catch (err) {
      if (attempt >= attempts || !isRetryableTransactionError(err)) throw err;
      // A short randomised pause lets the transaction that won the deadlock finish first.
      await new Promise((r) => setTimeout(r, Math.random() * 10 * attempt));
    }
  }
}
