import pg from 'pg';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { sql, type SQL } from 'drizzle-orm';
import type { Config } from '../config.ts';
import { isPoolExhausted, poolLoad, watchPool } from '../db/pool-load.ts';
import type { Pooler } from '../db/pooler.ts';
import type { IndexHit, IndexQuery, SearchDocument, SearchIndex, SyncCounts, TruthReader, UpsertOutcome } from './search-index.ts';

/**
 * The search index on PostgreSQL full-text search: table `search_documents` (see src/db/schema/search.ts:
 * a generated, weighted tsvector — title A, city+country B, description C — under a GIN index).
 *
 * It has its OWN pool (SEARCH_DATABASE_URL, which defaults to DATABASE_URL, so by default the same
 * database but separate connections): a slow or locked index ties up at most SEARCH_POOL_MAX
 * connections of its own, never the booking path's, and every statement is cut off after
 * SEARCH_STATEMENT_TIMEOUT_MS (how that setting reaches the server depends on DATABASE_POOLER: see
 * the constructor). Nothing here joins to `properties` or `bookings`: the index may live in another
 * database, so the callers read the truth through the main pool.
 */

export interface PostgresSearchIndexOptions {
  url: string;
  max?: number;
  statementTimeoutMs?: number;
  applicationName?: string;
  /** What stands between this pool and PostgreSQL (src/db/pooler.ts); `none` by default. */
  pooler?: Pooler;
}

export function searchIndexOptions(config: Config): PostgresSearchIndexOptions {
  return {
    url: config.SEARCH_DATABASE_URL,
    max: config.SEARCH_POOL_MAX,
    statementTimeoutMs: config.SEARCH_STATEMENT_TIMEOUT_MS,
    pooler: config.DATABASE_POOLER,
  };
}

/** What runs the index's statements: a drizzle on the pool or on one of its connections, or a transaction. */
type Executor = Pick<NodePgDatabase, 'execute'>;

const COLUMNS = sql.raw('property_id, title, description, city, country, currency, nightly_price, max_guests, source_updated_at');

/**
 * Writes documents, keeping for each property the one built from the newest row.
 *
 * The ON CONFLICT ... WHERE is the version check: a document replaces the stored one only if it
 * was built from a strictly newer properties row, or from the same row but the stored copy differs
 * (drift repaired by reindex). An equal, identical document is left alone — not even indexed_at
 * moves — so a redelivered message or a second reindex writes nothing. RETURNING lists exactly the
 * rows written. unnest() takes the whole batch in one statement.
 */
function upsertStatement(docs: SearchDocument[]): SQL {
  // sql.param: a JS array must reach pg as ONE array parameter (drizzle would expand a bare array into a list).
  const col = <K extends keyof SearchDocument>(k: K) => sql.param(docs.map((d) => d[k]));
  return sql`
    insert into search_documents as d (${COLUMNS})
    select * from unnest(
      ${col('propertyId')}::uuid[], ${col('title')}::text[], ${col('description')}::text[],
      ${col('city')}::text[], ${col('country')}::text[], ${col('currency')}::text[],
      ${col('nightlyPrice')}::int[], ${col('maxGuests')}::int[], ${col('sourceUpdatedAt')}::timestamptz[])
    on conflict (property_id) do update set
      title = excluded.title, description = excluded.description, city = excluded.city,
      country = excluded.country, currency = excluded.currency, nightly_price = excluded.nightly_price,
      max_guests = excluded.max_guests, source_updated_at = excluded.source_updated_at, indexed_at = now()
    where d.source_updated_at < excluded.source_updated_at
       or (d.source_updated_at = excluded.source_updated_at
           and (d.title, d.description, d.city, d.country, d.currency, d.nightly_price, d.max_guests)
               is distinct from
               (excluded.title, excluded.description, excluded.city, excluded.country, excluded.currency,
                excluded.nightly_price, excluded.max_guests))
    returning property_id`;
}

export class PostgresSearchIndex implements SearchIndex {
  readonly pool: pg.Pool;
  private readonly db: NodePgDatabase;
  private closed?: Promise<void>;

  private readonly pooler: Pooler;
  /** `set local …` of the settings, for a transaction-mode pooler (one simple-query round trip). */
  private readonly setLocal: SQL;
  /** `set …` of the settings, for a session-mode pooler, once per connection. */
  private readonly setSession: string;
  /** The connections the session's settings were sent on (session-mode pooler). */
  private readonly withSessionSettings = new WeakSet<pg.PoolClient>();

  constructor(opts: PostgresSearchIndexOptions) {
    const statementTimeout = opts.statementTimeoutMs ?? 2000;
    // A lock wait counts towards statement_timeout, so a locked table fails fast too. A session
    // left idle inside sync()'s transaction (its caller stalled) is cut off rather than holding
    // the per-document locks.
    const settings = {
      statement_timeout: statementTimeout,
      idle_in_transaction_session_timeout: Math.max(10_000, statementTimeout * 5),
    };
    this.pooler = opts.pooler ?? 'none';
    this.pool = new pg.Pool({
      connectionString: opts.url,
      max: opts.max ?? 4,
      application_name: opts.applicationName ?? 'stayhub-search',
      // Straight to PostgreSQL the settings ride on the startup packet, free. PgBouncer refuses
      // them there (08P01 "unsupported startup parameter"): see below.
      ...(this.pooler === 'none' ? settings : {}),
      // An unreachable index must fail about as fast as a slow one, not after the pg default (never).
      connectionTimeoutMillis: Math.min(Math.max(statementTimeout, 500), 5_000),
      idleTimeoutMillis: 30_000,
    });
    // Numbers from the configuration, never user input: inlined, so the settings go as one simple query.
    const assignments = (verb: string) =>
      Object.entries(settings)
        .map(([name, ms]) => `${verb} ${name} = ${Math.trunc(ms)}`)
        .join('; ');
    this.setLocal = sql.raw(assignments('set local'));
    this.setSession = assignments('set');
    // An idle client losing its connection emits 'error' on the pool; unhandled, it would kill
    // the process that is only using the index as an optimisation.
    this.pool.on('error', () => {});
    // Same for a client that is checked out when its connection is killed (see db/client.ts).
    this.pool.on('connect', (client) => client.on('error', () => {}));
    watchPool(this.pool);
    this.db = drizzle(this.pool);
  }

  /**
   * Runs `work` on a connection that has the settings. Straight to PostgreSQL, each has them from
   * its start. Behind a session-mode pooler, a client keeps one server connection while it stays
   * connected: the settings are SET once, on the connection's first use (a connection where that
   * failed is dropped rather than used without a timeout).
   */
  private async onConnection<T>(work: (db: NodePgDatabase) => Promise<T>): Promise<T> {
    if (this.pooler !== 'session') return work(this.db);
    const client = await this.pool.connect();
    try {
      if (!this.withSessionSettings.has(client)) {
        await client.query(this.setSession);
        this.withSessionSettings.add(client);
      }
    } catch (err) {
      client.release(err instanceof Error ? err : new Error(String(err)));
      throw err;
    }
    try {
      return await work(drizzle(client));
    } finally {
      client.release();
    }
  }

  /**
   * Runs `work` where the settings hold. Behind a transaction-mode pooler only a transaction stays
   * on one server connection, so the work runs in one, after SET LOCAL: three more round trips
   * (begin, set, commit) than elsewhere.
   */
  private withSettings<T>(work: (q: Executor) => Promise<T>): Promise<T> {
    if (this.pooler !== 'transaction') return this.onConnection(work);
    return this.db.transaction(async (tx) => {
      await tx.execute(this.setLocal);
      return work(tx);
    });
  }

  async upsert(doc: SearchDocument): Promise<UpsertOutcome> {
    const res = await this.withSettings((q) => q.execute(upsertStatement([doc])));
    return { written: res.rows.length === 1 };
  }

  async remove(propertyId: string): Promise<boolean> {
    const res = await this.withSettings((q) => q.execute(sql`delete from search_documents where property_id = ${propertyId}::uuid`));
    return (res.rowCount ?? 0) > 0;
  }

  async sync(propertyIds: string[], readTruth: TruthReader): Promise<SyncCounts> {
    const ids = [...new Set(propertyIds)];
    if (ids.length === 0) return { written: 0, unchanged: 0, removed: 0 };
    return this.onConnection((db) =>
      db.transaction(async (tx) => {
        if (this.pooler === 'transaction') await tx.execute(this.setLocal);
        /*
         * One transaction-scoped advisory lock per document, taken in key order (two batches that
         * overlap can then never deadlock). Every writer of a document — the worker's handler, the
         * direct write after a save, reindex — holds its lock while it reads the truth and writes,
         * so the writes of one document happen in the order of their truth reads and the last
         * reader's state is what stays. Without this, a stale "active" write that read the row
         * before a deactivation could land after the delete and resurrect the document (the version
         * check cannot help: the deleted document left no version behind). Waiting for the lock
         * counts towards statement_timeout, so a stuck writer makes others fail, not hang.
         */
        await tx.execute(sql`
        select pg_advisory_xact_lock(k)
        from (select hashtextextended('search_documents:' || id, 0) as k
              from unnest(${sql.param(ids)}::text[]) as id order by 1) as keys`);
        const truth = await readTruth(ids);
        const present = ids.map((id) => truth.get(id)).filter((d): d is SearchDocument => d !== undefined);
        const gone = ids.filter((id) => !truth.has(id));
        const written = present.length ? (await tx.execute(upsertStatement(present))).rows.length : 0;
        const removed = gone.length
          ? ((await tx.execute(sql`delete from search_documents where property_id = any(${sql.param(gone)}::uuid[])`)).rowCount ?? 0)
          : 0;
        return { written, unchanged: present.length - written, removed };
      }),
    );
  }

  async query(q: IndexQuery): Promise<IndexHit[]> {
    const filters: SQL[] = [];
    if (q.city !== undefined) filters.push(sql`lower(city) = lower(${q.city})`); // search_documents_city_idx
    if (q.country !== undefined) filters.push(sql`country = ${q.country}`);
    if (q.guests !== undefined) filters.push(sql`max_guests >= ${q.guests}`);
    if (q.minPrice !== undefined) filters.push(sql`nightly_price >= ${q.minPrice}`);
    if (q.maxPrice !== undefined) filters.push(sql`nightly_price <= ${q.maxPrice}`);

    if (q.text !== undefined) {
      /*
       * Relevance: ts_rank_cd (cover density) with the A/B/C weights of the generated tsvector, so
       * a title hit outranks a city hit outranks a description hit. websearch_to_tsquery never
       * raises on user syntax. Keyset pagination on (rank desc, property_id asc): rank is a
       * float4, compared as float4 against the exact text the previous page returned, so a cursor
       * lands precisely between two hits. Every match is ranked before the sort (no index gives
       * this order); the GIN index narrows the matches first.
       */
      const after =
        q.after?.rank !== undefined
          ? sql`where r.rank < ${q.after.rank}::real or (r.rank = ${q.after.rank}::real and r.property_id > ${q.after.propertyId}::uuid)`
          : sql``;
      const res = await this.withSettings((db) =>
        db.execute<{ property_id: string; rank: string }>(sql`
        select r.property_id, r.rank::text as rank
        from (
          select property_id, ts_rank_cd(document, query) as rank
          from search_documents, websearch_to_tsquery('simple', ${q.text}) as query
          where document @@ query ${filters.length ? sql`and ${sql.join(filters, sql` and `)}` : sql``}
        ) as r
        ${after}
        order by r.rank desc, r.property_id asc
        limit ${q.limit}`),
      );
      return res.rows.map((r) => ({
        propertyId: r.property_id,
        rank: Number(r.rank),
        key: { rank: r.rank, propertyId: r.property_id },
      }));
    }

    // No text: the primary key's order, walked by the primary key index.
    if (q.after) filters.push(sql`property_id > ${q.after.propertyId}::uuid`);
    const res = await this.withSettings((db) =>
      db.execute<{ property_id: string }>(sql`
      select property_id from search_documents
      ${filters.length ? sql`where ${sql.join(filters, sql` and `)}` : sql``}
      order by property_id
      limit ${q.limit}`),
    );
    return res.rows.map((r) => ({ propertyId: r.property_id, rank: null, key: { propertyId: r.property_id } }));
  }

  async listIds(after: string | null, limit: number): Promise<string[]> {
    const res = await this.withSettings((db) =>
      db.execute<{ property_id: string }>(sql`
      select property_id from search_documents
      ${after ? sql`where property_id > ${after}::uuid` : sql``}
      order by property_id limit ${limit}`),
    );
    return res.rows.map((r) => r.property_id);
  }

  async count(): Promise<number> {
    const res = await this.withSettings((db) => db.execute<{ n: number }>(sql`select count(*)::int as n from search_documents`));
    return res.rows[0]!.n;
  }

  expectedWaitMs(): number {
    return poolLoad(this.pool)?.expectedWaitMs ?? 0;
  }

  isBusy(err: unknown): boolean {
    return isPoolExhausted(err, this.pool);
  }

  close(): Promise<void> {
    return (this.closed ??= this.pool.end());
  }
}

export function createPostgresSearchIndex(opts: PostgresSearchIndexOptions): PostgresSearchIndex {
  return new PostgresSearchIndex(opts);
}
