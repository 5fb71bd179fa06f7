import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { createPostgresSearchIndex, searchIndexOptions } from '../../search/postgres-search-index.ts';
import { searchQuery, searchResponse } from '../../search/search.schemas.ts';
import { searchProperties } from '../../search/search.service.ts';
import { problems } from '../plugins/openapi.ts';
import type { AppContext } from '../context.ts';

/**
 * GET /search. Public, like GET /properties/:id. The index comes from the caller (src/commands/api.ts, or a
 * test) so that the direct write after a save and the search share one pool; an app built without
 * one gets its own here, on the search pool settings, closed with the app.
 */
export const searchRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  let searchIndex = ctx.searchIndex;
  if (!searchIndex) {
    const own = createPostgresSearchIndex(searchIndexOptions(ctx.config));
    app.addHook('onClose', () => own.close());
    searchIndex = own;
  }
  const deps = { db: ctx.db.db, searchIndex };

  app.get(
    '/search',
    {
      schema: {
        summary: 'Search properties by text, city, guests, free dates and price',
        tags: ['search'],
        querystring: searchQuery,
        response: {
          200: searchResponse.describe('A page of matching properties, best first, and the cursor of the next page'),
          ...problems('validation_failed', 'invalid_cursor', 'service_unavailable', 'overloaded'),
        },
      },
    },
    async (request) => searchProperties(deps, request.query),
  );
};
