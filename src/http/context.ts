import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../config.ts';
import type { Database } from '../db/client.ts';
import type { AfterPropertyCommit } from '../properties/properties.service.ts';
import type { SearchIndex } from '../search/search-index.ts';

/**
 * What every route plugin receives: the app's dependencies, built once by the caller. A module of
 * its own so that the route files and app.ts (which imports them) do not import each other.
 */
export interface AppContext {
  config: Config;
  db: Database;
  /** /health's, /metrics' and the outbox sample's own small pool (src/db/health-database.ts); made from `db`'s URL if not given. */
  healthDb?: Database;
  /** Runs after a property change commits (the search index's direct write). */
  afterPropertyCommit?: AfterPropertyCommit;
  /** The search index (its own pool); GET /search opens one from config if not given. */
  searchIndex?: SearchIndex;
  /** Today's date (YYYY-MM-DD, UTC); tests pin it. */
  today?: () => string;
}

/** The app as a route plugin sees it (zod validates its routes): what a function registering a group of routes takes. */
export type ZodApp = Parameters<FastifyPluginAsyncZod>[0];
