import type { Db } from '../db/client.ts';
import type { SearchIndex } from './search-index.ts';
import { activePropertyIds, countProperties, indexProperties, propertyIdBatch } from './source.ts';

/**
 * Rebuilds the search index from the properties table while the API keeps serving.
 *
 * No truncate and no swap: documents are upserted in place, batch by batch, so at every moment
 * search answers from a complete index (the old document until its batch replaces it). Pass 1
 * walks every property in id order and syncs its document (upsert if active, delete if not).
 * Pass 2 walks the index's documents and deletes those whose property no longer exists or is
 * inactive (pass 1 cannot see a property that is gone). Each batch is one transaction on the
 * index, through the same per-document locks as the worker and the direct write, so a save landing
 * mid-rebuild is never overwritten by the older row a batch read a moment before.
 *
 * Interrupting is safe at any point: stopping between batches (the `signal`) leaves every batch
 * either applied or not, and even a kill mid-batch only rolls that batch back. A second run
 * simply redoes the work; documents already current are not rewritten.
 */

export interface ReindexProgress {
  pass: 'properties' | 'sweep';
  /** Properties synced so far (pass 1) — what count/rate/ETA are about. */
  done: number;
  /** Properties in the table when the run started. */
  total: number;
  written: number;
  unchanged: number;
  removed: number;
  elapsedMs: number;
}

export interface ReindexSummary extends ReindexProgress {
  interrupted: boolean;
  /** Documents in the index at the end. */
  documents: number;
}

export interface ReindexOptions {
  db: Db;
  searchIndex: SearchIndex;
  batchSize?: number;
  /** Aborting finishes the batch in flight, then stops. */
  signal?: AbortSignal;
  onProgress?: (p: ReindexProgress) => void;
}

export async function reindex(opts: ReindexOptions): Promise<ReindexSummary> {
  const { db, searchIndex, signal, onProgress } = opts;
  const batchSize = opts.batchSize ?? 500;
  const started = performance.now();
  const p: ReindexProgress = {
    pass: 'properties',
    done: 0,
    total: await countProperties(db),
    written: 0,
    unchanged: 0,
    removed: 0,
    elapsedMs: 0,
  };
  const report = () => {
    p.elapsedMs = performance.now() - started;
    onProgress?.({ ...p });
  };
  const add = (c: { written: number; unchanged: number; removed: number }) => {
    p.written += c.written;
    p.unchanged += c.unchanged;
    p.removed += c.removed;
  };

  // Pass 1: every property, in internal id order (keyset, so rows inserted meanwhile are fine).
  let lastId = 0;
  while (!signal?.aborted) {
    const batch = await propertyIdBatch(db, lastId, batchSize);
    if (batch.length === 0) break;
    lastId = batch[batch.length - 1]!.id;
    add(
      await indexProperties(
        db,
        searchIndex,
        batch.map((r) => r.publicId),
      ),
    );
    p.done += batch.length;
    report();
  }

  // Pass 2: documents whose property is gone (or inactive and missed above). Synced, not blindly
  // deleted, so a property activated a moment ago is upserted rather than removed.
  let after: string | null = null;
  if (!signal?.aborted) p.pass = 'sweep';
  while (!signal?.aborted) {
    const ids = await searchIndex.listIds(after, batchSize);
    if (ids.length === 0) break;
    after = ids[ids.length - 1]!;
    const active = await activePropertyIds(db, ids);
    const stale = ids.filter((id) => !active.has(id));
    if (stale.length) add(await indexProperties(db, searchIndex, stale));
    report();
  }

  p.elapsedMs = performance.now() - started;
  return { ...p, interrupted: !!signal?.aborted, documents: await searchIndex.count() };
}
