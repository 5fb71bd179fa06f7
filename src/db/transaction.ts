import type { PgTransaction } from 'drizzle-orm/pg-core';
import type { NodePgQueryResultHKT } from 'drizzle-orm/node-postgres';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import type * as schema from './schema.ts';
import type { Db } from './client.ts';
import { isRetryableTransactionError } from './pg-errors.ts';
import { retryableWriteFault } from './write-faults.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A transaction handle. Repositories and `enqueue` take one of these, never the pool, so a write
 * that must be atomic with others cannot be made outside the caller's transaction.
 */
export type Tx = PgTransaction<NodePgQueryResultHKT, typeof schema, ExtractTablesWithRelations<typeof schema>>;

/**
 * Work to run once a transaction has committed, per transaction started by `withTransaction`.
 * Never for a rolled-back attempt: its list is dropped with it.
 */
const afterCommit = new WeakMap<Tx, Map<string, (db: Db) => Promise<unknown>>>();

/** Work to run once a transaction started by `withTransaction` has ended: committed or rolled back. */
const atEnd = new WeakMap<Tx, (() => void)[]>();

/**
 * Asks for `fn` to run after `tx` commits (once per `name`: a second request with the same name is
 * the same work). Returns false when `tx` was not started by `withTransaction`, which alone runs
 * these: the caller must then do the work inside the transaction instead. An after-commit failure
 * cannot undo the commit, so it must only be an optimisation (see outbox/enqueue.ts).
 */
export function runAfterCommit(tx: Tx, name: string, fn: (db: Db) => Promise<unknown>): boolean {
  const hooks = afterCommit.get(tx);
  if (!hooks) return false;
  if (!hooks.has(name)) hooks.set(name, fn);
  return true;
}

/**
 * Asks for `fn` to run once `tx` has ended, whether it committed or rolled back (and before any
 * after-commit work). Returns false when `tx` was not started by `withTransaction`.
 */
export function runAtEnd(tx: Tx, fn: () => void): boolean {
  const fns = atEnd.get(tx);
  if (!fns) return false;
  fns.push(fn);
  return true;
}

/**
 * Runs `work` in one transaction and commits it. A deadlock (40P01) or serialization failure
 * (40001) rolls back everything `work` did, so it is safe to run again from the start: it is
 * retried a few times before it surfaces. So is a write refused for a fault a module registered
 * (write-faults.ts: the outbox's missing day), once the fault has repaired it. Any other error
 * rolls back and is rethrown.
 */
export async function withTransaction<T>(db: Db, work: (tx: Tx) => Promise<T>, attempts = 5): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      const hooks = new Map<string, (db: Db) => Promise<unknown>>();
      const ended: (() => void)[] = [];
      const result = await db
        .transaction((tx) => {
          afterCommit.set(tx, hooks);
          atEnd.set(tx, ended);
          return work(tx);
        })
        .finally(() => {
          for (const fn of ended) fn();
        });
      for (const hook of hooks.values()) await hook(db).catch(() => undefined);
      return result;
    } catch (err) {
      const fault = attempt < attempts ? retryableWriteFault(err) : undefined;
      if (fault) {
        await fault.repair(db);
        continue;
      }
      if (attempt >= attempts || !isRetryableTransactionError(err)) throw err;
      // A short randomised pause lets the transaction that won the deadlock finish first.
      await sleep(Math.random() * 10 * attempt);
    }
  }
}
