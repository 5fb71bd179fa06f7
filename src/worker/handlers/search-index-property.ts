import type { Db } from '../../db/client.ts';
import type { SearchIndex } from '../../search/search-index.ts';
import { indexProperties } from '../../search/source.ts';
import type { TopicHandler } from '../../messages/handler.ts';
import { inSpan } from '../../telemetry/tracing.ts';

export const SEARCH_INDEX_PROPERTY = 'search.index-property';

export interface SearchIndexPropertyDeps {
  db: Db;
  searchIndex: SearchIndex;
}

/**
 * `property.changed` → the property's search document. The event is only a trigger: the handler
 * re-reads the property row (the truth) and upserts its document, or removes it if the property
 * is inactive or gone. Running it twice, or for messages in any order, leaves the index as the
 * latest row says: sync() serialises writers of one document and reads the row after taking the
 * document's lock, and the upsert never replaces a document built from a newer row.
 *
 * An unreachable or slow index throws, and the worker retries with backoff; after MAX_ATTEMPTS the
 * message goes DEAD, which for this derived data means "stale until requeued or reindexed", not a
 * lost fact.
 */
export function searchIndexPropertyHandler(deps: SearchIndexPropertyDeps): TopicHandler<'property.changed'> {
  return {
    name: SEARCH_INDEX_PROPERTY,
    topic: 'property.changed',
    async handle({ payload, log }) {
      // Its own span (tracing on): the search index is a store of its own, reached through its own pool.
      const counts = await inSpan('write search document', { attributes: { 'stayhub.property_id': payload.propertyId } }, () =>
        indexProperties(deps.db, deps.searchIndex, [payload.propertyId]),
      );
      log.debug({ propertyId: payload.propertyId, reason: payload.reason, ...counts }, 'search document synced');
    },
  };
}
