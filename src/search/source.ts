import { and, asc, eq, gt, gte, inArray, lte, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { properties, users } from '../db/schema.ts';
import type { PropertyWithHost } from '../properties/properties.repository.ts';
import type { SearchDocument, SearchIndex, SyncCounts, TruthReader } from './search-index.ts';

/*
 * The truth side of search, read through the MAIN pool: `properties` (what a document should say)
 * and `bookings` (availability). The index never joins these; it may live in another database.
 */

/**
 * Builds the documents of the given properties from their current rows. Inactive and missing
 * properties are left out of the map, which tells `SearchIndex.sync` to delete their documents.
 */
export function truthReader(db: Db): TruthReader {
  return async (propertyIds) => {
    const rows = await db
      .select({
        propertyId: properties.publicId,
        title: properties.title,
        description: properties.description,
        city: properties.city,
        country: properties.country,
        currency: properties.currency,
        nightlyPrice: properties.nightlyPrice,
        maxGuests: properties.maxGuests,
        // Microseconds kept (a JS Date would drop them): the version an upsert compares.
        sourceUpdatedAt: sql<string>`to_char(${properties.updatedAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`,
      })
      .from(properties)
      .where(and(inArray(properties.publicId, propertyIds), eq(properties.active, true)));
    return new Map<string, SearchDocument>(rows.map((r) => [r.propertyId, r]));
  };
}

/** Re-reads these properties and upserts or removes their documents (the one write path into the index). */
export function indexProperties(db: Db, index: SearchIndex, propertyIds: string[]): Promise<SyncCounts> {
  return index.sync(propertyIds, truthReader(db));
}

/** One batch of property public ids in internal-id order (reindex walks the table with this). */
export async function propertyIdBatch(db: Db, afterId: number, limit: number) {
  return db
    .select({ id: properties.id, publicId: properties.publicId })
    .from(properties)
    .where(gt(properties.id, afterId))
    .orderBy(asc(properties.id))
    .limit(limit);
}

/** Which of these public ids are active properties (reindex's sweep over the index's documents). */
export async function activePropertyIds(db: Db, publicIds: string[]): Promise<Set<string>> {
  if (publicIds.length === 0) return new Set();
  const rows = await db
    .select({ publicId: properties.publicId })
    .from(properties)
    .where(and(inArray(properties.publicId, publicIds), eq(properties.active, true)));
  return new Set(rows.map((r) => r.publicId));
}

export async function countProperties(db: Db): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(properties);
  return row!.n;
}

export interface TruthFilter {
  city?: string;
  country?: string;
  guests?: number;
  minPrice?: number;
  maxPrice?: number;
  /** Half-open stay [checkIn, checkOut) that must not overlap a confirmed booking. */
  stay?: { checkIn: string; checkOut: string };
}

/**
 * Loads the candidate properties the index returned, keeping only those that, according to the
 * truth, are active, still match the filters, and (with dates) are free: no CONFIRMED booking
 * overlaps [checkIn, checkOut). The index may lag a save; re-checking here means a lagging index
 * can make a property missing from results, never make a result contradict the filters or show
 * a booked or deactivated property. The text match itself is not re-checked (that is the index's
 * job, and its rank is what orders the page).
 */
export async function loadMatchingProperties(db: Db, publicIds: string[], f: TruthFilter): Promise<Map<string, PropertyWithHost>> {
  if (publicIds.length === 0) return new Map();
  const where: SQL[] = [inArray(properties.publicId, publicIds), eq(properties.active, true)];
  if (f.city !== undefined) where.push(sql`lower(${properties.city}) = lower(${f.city})`);
  if (f.country !== undefined) where.push(eq(properties.country, f.country));
  if (f.guests !== undefined) where.push(gte(properties.maxGuests, f.guests));
  if (f.minPrice !== undefined) where.push(gte(properties.nightlyPrice, f.minPrice));
  if (f.maxPrice !== undefined) where.push(lte(properties.nightlyPrice, f.maxPrice));
  if (f.stay) {
    // Same predicate as the bookings_no_overlap exclusion constraint (half-open ranges, confirmed
    // only), so back-to-back stays are free exactly when a booking would be accepted. Its GiST
    // index on (property_id, stay) answers each probe.
    where.push(sql`not exists (
      select 1 from bookings b
      where b.property_id = ${properties.id} and b.status = 'confirmed'
        and b.stay && daterange(${f.stay.checkIn}::date, ${f.stay.checkOut}::date, '[)'))`);
  }
  const rows = await db
    .select({ property: properties, hostPublicId: users.publicId })
    .from(properties)
    .innerJoin(users, eq(users.id, properties.hostId))
    .where(and(...where));
  return new Map(rows.map((r) => [r.property.publicId, { ...r.property, hostPublicId: r.hostPublicId }]));
}
