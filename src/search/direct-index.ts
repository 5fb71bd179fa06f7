import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import type { AfterPropertyCommit } from '../properties/properties.service.ts';
import type { SearchIndex } from './search-index.ts';
import { indexProperties } from './source.ts';

/**
 * The direct index write after a property save: `afterPropertyCommit` in properties.service.ts.
 *
 * WHICH CRASH LOSES WHAT. By the time this runs, the property change AND its `property.changed`
 * outbox row have committed in ONE transaction (properties.service.ts). So:
 *   - a crash before that COMMIT loses the change and its event together: nothing to index;
 *   - a crash after it, before or during this attempt, loses only this attempt: the outbox row is
 *     durable and the worker's `search.index-property` handler indexes the property;
 *   - this attempt failing or timing out loses nothing either, for the same reason.
 * So this write is purely an optimisation for freshness (the host usually sees the change in
 * search as soon as the save returns), never the only record that the index owes an update. That
 * is why we do NOT enqueue a second `property.changed {reason: 'index-write-failed'}` on failure,
 * as the article's variant does: that second transaction exists there because the article's save
 * wrote no event of its own. Here it would only duplicate a message already committed.
 *
 * WHERE THIS PATH IS STILL WEAKER THAN THE BOOKING PATH. The intent is transactional; the index is
 * not. Search can show the state before a save until the worker catches up (seconds normally; for
 * as long as the worker is stopped or the index is down, after which messages can go DEAD), and a
 * lost or corrupted index table is rebuilt by `npm run reindex`, not replayed. Search results are
 * re-checked against the properties and bookings tables (src/search/source.ts), so the lag shows
 * as a property missing from results, not as a wrong one.
 *
 * NEVER FAIL OR SLOW THE SAVE. The save waits at most `timeoutMs` for this attempt; past that the
 * response goes out and the attempt finishes (or fails) in the background, bounded by the index
 * pool's statement and connect timeouts. Every error is logged and swallowed. After a failure or
 * a timeout the direct path stays off for `cooldownMs`: while the index is sick, saves do not pay
 * even the budget, and the worker (with its backoff) does the indexing.
 */
export interface DirectIndexer {
  afterPropertyCommit: AfterPropertyCommit;
  /** Waits for attempts still running in the background (graceful shutdown, before the pools close). */
  drain(): Promise<void>;
}

export interface DirectIndexerOptions {
  db: Db;
  searchIndex: SearchIndex;
  log: Logger;
  timeoutMs: number;
  cooldownMs?: number;
}

export function createDirectIndexer(opts: DirectIndexerOptions): DirectIndexer {
  const { db, searchIndex, log, timeoutMs } = opts;
  const cooldownMs = opts.cooldownMs ?? 5_000;
  const inFlight = new Set<Promise<void>>();
  let offUntil = 0;

  const trip = () => {
    offUntil = Date.now() + cooldownMs;
  };

  async function afterPropertyCommit(propertyId: string): Promise<void> {
    if (timeoutMs === 0 || Date.now() < offUntil) return; // the worker will index it
    const attempt: Promise<void> = indexProperties(db, searchIndex, [propertyId]).then(
      () => undefined,
      (err: unknown) => {
        trip();
        log.warn({ err, propertyId }, 'direct search-index write failed; the outbox worker will index the property');
      },
    );
    const tracked = attempt.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);

    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      tracked.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      trip();
      log.warn(
        { propertyId, timeoutMs },
        'direct search-index write is slow; answering without it (the outbox worker will index the property)',
      );
    }
  }

  return {
    afterPropertyCommit: (propertyId) =>
      // Belt and braces: nothing thrown synchronously above may reach the host's request either.
      afterPropertyCommit(propertyId).catch((err: unknown) => log.error({ err, propertyId }, 'direct search-index hook failed')),
    async drain() {
      await Promise.allSettled([...inFlight]);
    },
  };
}
