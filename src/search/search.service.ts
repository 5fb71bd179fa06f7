import type { Db } from '../db/client.ts';
import { isDataException } from '../db/pg-errors.ts';
import { AppError } from '../errors.ts';
import { toPropertyResponse } from '../properties/properties.service.ts';
import type { PropertyWithHost } from '../properties/properties.repository.ts';
import type { IndexHit, IndexKey, SearchIndex } from './search-index.ts';
import { cursorKey, encodeSearchCursor, type SearchQuery, type SearchResponse } from './search.schemas.ts';
import { loadMatchingProperties, type TruthFilter } from './source.ts';

export interface SearchDeps {
  db: Db;
  searchIndex: SearchIndex;
}

/**
 * At most this many index hits are examined for one page. With a date filter most candidates can
 * turn out booked; rather than walk the whole index in one request, a page may then come back
 * short (even empty) with a nextCursor that continues after the last hit examined — never a gap.
 */
export const MAX_HITS_EXAMINED = 2_000;

/**
 * Search: candidates from the index in ranking order, checked page by page against the truth.
 *
 * The index answers "which properties match this text and these filters, in which order" and may
 * lag. The main database answers "is it active, does it still match, is it free on these dates"
 * and supplies what is shown, so an item looks exactly like GET /properties/:id. The loop fills
 * the page: ask the index for the next batch after the last key, keep the hits the truth accepts,
 * repeat until limit+1 are kept (the +1 proves there is a next page) or the index runs out.
 *
 * The cursor is the ordering key of the last item returned, so the next page starts strictly after
 * it: no duplicates and no gaps while the set does not change. (A document re-ranked by an edit
 * between two page requests can move across the cursor; that is the price of keyset pagination
 * over live data, and it never repeats an item on one page.)
 */
export async function searchProperties(deps: SearchDeps, p: SearchQuery): Promise<SearchResponse> {
  const filter: TruthFilter = {
    city: p.city,
    country: p.country,
    guests: p.guests,
    minPrice: p.minPrice,
    maxPrice: p.maxPrice,
    stay: p.checkIn && p.checkOut ? { checkIn: p.checkIn, checkOut: p.checkOut } : undefined,
  };
  const want = p.limit + 1;
  // Without dates nearly every candidate is kept; with them, fetch wider batches.
  const batchSize = Math.min(filter.stay ? Math.max(p.limit * 3, 50) : want, 500);

  const kept: { hit: IndexHit; property: PropertyWithHost }[] = [];
  let after: IndexKey | undefined = p.cursor !== undefined ? cursorKey(p.cursor, p.q) : undefined;
  let examined = 0;
  let exhausted = false;

  while (kept.length < want) {
    const hits = await queryIndex(deps.searchIndex, {
      text: p.q,
      city: p.city,
      country: p.country,
      guests: p.guests,
      minPrice: p.minPrice,
      maxPrice: p.maxPrice,
      after,
      limit: batchSize,
    });
    const truth = await loadMatchingProperties(
      deps.db,
      hits.map((h) => h.propertyId),
      filter,
    );
    for (const hit of hits) {
      after = hit.key;
      examined++;
      const property = truth.get(hit.propertyId);
      if (property) kept.push({ hit, property });
      if (kept.length === want) break;
    }
    if (hits.length < batchSize && kept.length < want) {
      exhausted = true;
      break;
    }
    if (examined >= MAX_HITS_EXAMINED) break;
  }

  const page = kept.slice(0, p.limit);
  let nextCursor: string | null = null;
  if (kept.length > p.limit) nextCursor = encodeSearchCursor(page[page.length - 1]!.hit.key);
  else if (!exhausted && after) nextCursor = encodeSearchCursor(after); // stopped by MAX_HITS_EXAMINED

  return {
    items: page.map(({ hit, property }) => ({
      property: toPropertyResponse(property, property.hostPublicId),
      rank: hit.rank,
    })),
    nextCursor,
  };
}

/**
 * An index that is down or slower than its statement timeout makes search unavailable (503), not
 * a bug (500); one whose connections were all busy for the whole wait is overloaded (503 too, with
 * its own code). Either way the answer carries Retry-After (src/http/problem.ts). Nothing else is affected: bookings and saves never wait on the index. A data
 * exception (SQLSTATE 22xxx) is not the index failing but a value from the request it refused:
 * it goes to the error handler as it is, which answers 400.
 */
async function queryIndex(index: SearchIndex, q: Parameters<SearchIndex['query']>[0]): Promise<IndexHit[]> {
  try {
    return await index.query(q);
  } catch (err) {
    if (isDataException(err)) throw err;
    // The cause rides along for the error log (the error handler logs every >= 500 in full).
    // Every connection busy answering other searches is load, not an outage: the client is told so.
    if (index.isBusy(err)) throw Object.assign(new AppError('overloaded', 'Search is busy; retry shortly'), { cause: err });
    throw Object.assign(new AppError('service_unavailable', 'Search is temporarily unavailable'), { cause: err });
  }
}
