/**
 * The search index boundary. The index is DERIVED data: everything in it can be rebuilt from the
 * `properties` table (`npm run reindex`), so losing or delaying a write here is acceptable, and
 * nothing on a host's save path may wait on it for long or fail because of it.
 *
 * One implementation today (PostgreSQL full-text, ./postgres-search-index.ts). The interface is
 * shaped so that another engine could stand behind it: documents are keyed by the property's public
 * id, writes carry the version of the source row they were built from, and the query returns ids
 * and ranks only — the caller shows properties read from the truth, not from the index.
 */

/** What the index holds for one property: the searchable text and the fields search filters on. */
export interface SearchDocument {
  /** The property's public id: the document id. Writing the same document twice changes nothing. */
  propertyId: string;
  title: string;
  description: string;
  city: string;
  /** ISO 3166-1 alpha-2, upper case. */
  country: string;
  currency: string;
  /** Minor units. */
  nightlyPrice: number;
  maxGuests: number;
  /**
   * properties.updated_at of the row this document was built from, as UTC ISO text with
   * microseconds (a JS Date would drop them, and two saves within a millisecond must still order).
   * An upsert never replaces a document built from a newer row.
   */
  sourceUpdatedAt: string;
}

/** The ordering key of a hit, which a cursor carries: (rank, id) with a text query, (id) without. */
export type IndexKey = { rank: string; propertyId: string } | { rank?: undefined; propertyId: string };

export interface IndexQuery {
  /** Free text (web-search syntax: words, "a phrase", -not, or). Absent: no relevance, id order. */
  text?: string;
  city?: string;
  country?: string;
  /** Documents whose maxGuests is at least this. */
  guests?: number;
  minPrice?: number;
  maxPrice?: number;
  /** Return hits strictly after this key in the ordering. */
  after?: IndexKey;
  limit: number;
}

export interface IndexHit {
  propertyId: string;
  /** ts_rank_cd of the document for the text query; null without one. */
  rank: number | null;
  key: IndexKey;
}

export interface UpsertOutcome {
  /** True if the document was inserted or replaced; false if the index already had this or a newer version. */
  written: boolean;
}

/**
 * Reads the current state of some properties from the source of truth. A property missing from
 * the returned map (deleted, or inactive) must not be in the index.
 */
export type TruthReader = (propertyIds: string[]) => Promise<Map<string, SearchDocument>>;

export interface SyncCounts {
  /** Documents inserted or replaced. */
  written: number;
  /** Documents already current (or newer): nothing written. */
  unchanged: number;
  /** Documents deleted because their property is gone or inactive. */
  removed: number;
}

export interface SearchIndex {
  /** Inserts or replaces one document, unless the index holds one built from the same or a newer row. */
  upsert(doc: SearchDocument): Promise<UpsertOutcome>;
  /** Deletes a document; true if there was one. */
  remove(propertyId: string): Promise<boolean>;
  /**
   * Brings the documents of these properties in line with the truth: writers of the same document
   * are serialised, and `readTruth` is called only once they are, so whichever writer reads the
   * truth last also writes last. This is what makes "deactivate, then a late write of the old
   * active state" impossible, which comparing versions alone cannot prevent once the document has
   * been deleted. The handler, the direct write and reindex all go through here.
   */
  sync(propertyIds: string[], readTruth: TruthReader): Promise<SyncCounts>;
  /** Hits in ranking order (rank desc then id, or id), strictly after `after`. */
  query(q: IndexQuery): Promise<IndexHit[]>;
  /** Document ids in id order after `after`: reindex walks these to find documents of deleted properties. */
  listIds(after: string | null, limit: number): Promise<string[]>;
  /** Number of documents (tests, reindex summary). */
  count(): Promise<number>;
  /** The wait (ms) a query joining the index's queue now can expect: the API refuses searches early on it. */
  expectedWaitMs(): number;
  /** True when `err` is a query that waited out its turn while the index went on answering others: busy, not down. */
  isBusy(err: unknown): boolean;
  close(): Promise<void>;
}
