import { sql } from 'drizzle-orm';
import { char, index, integer, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import { ts, tsvector } from './columns.ts';

/**
 * The search index: derived from `properties`, rebuilt by `npm run reindex`, reached through its
 * own pool. Losing a write here is acceptable; see src/search/.
 */
export const searchDocuments = pgTable(
  'search_documents',
  {
    /** The property's public id: upserting the same document twice leaves the same index. */
    propertyId: uuid('property_id').primaryKey(),
    title: text('title').notNull(),
    description: text('description').notNull(),
    city: text('city').notNull(),
    country: char('country', { length: 2 }).notNull(),
    currency: char('currency', { length: 3 }).notNull(),
    nightlyPrice: integer('nightly_price').notNull(),
    maxGuests: integer('max_guests').notNull(),
    /** Title weighs most, then city and country, then description. */
    document: tsvector('document')
      .notNull()
      .generatedAlwaysAs(
        sql`setweight(to_tsvector('simple', coalesce(title, '')), 'A') || setweight(to_tsvector('simple', coalesce(city, '') || ' ' || coalesce(country, '')), 'B') || setweight(to_tsvector('simple', coalesce(description, '')), 'C')`,
      ),
    /** The properties.updated_at this document was built from: an older write never wins. */
    sourceUpdatedAt: ts('source_updated_at').notNull(),
    indexedAt: ts('indexed_at').notNull().defaultNow(),
  },
  (t) => [
    index('search_documents_document_idx').using('gin', t.document),
    index('search_documents_city_idx').on(sql`lower(${t.city})`),
    index('search_documents_country_idx').on(t.country),
  ],
);
