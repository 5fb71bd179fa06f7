import net from 'node:net';
import pino from 'pino';
import { loadConfig } from '../src/config.ts';
import { createDatabase, type Database } from '../src/db/client.ts';
import { runMigrations } from '../src/db/migrate.ts';
import { registerOutboxHooks } from '../src/outbox/index.ts';
import { buildApp } from '../src/http/app.ts';
import { createPostgresSearchIndex } from '../src/search/postgres-search-index.ts';
import { reindex } from '../src/search/reindex.ts';
import type { SearchIndex } from '../src/search/search-index.ts';
import { parseFlags, wholeNumber } from './bench/lib/cli.ts';
import { startThrowawayPostgres, type ThrowawayPostgres } from './lib/postgres.ts';

/*
 * Measures the search index on realistic volume (a measurement, not a test: nothing here passes
 * or fails). Run: `npm run measure:search -- [--properties 10000] [--requests 2000]` (USAGE below).
 * The figures go to stdout only; nothing is written into the repository.
 *
 * Starts a throw-away embedded PostgreSQL (or uses MEASURE_DATABASE_URL, whose database it
 * fills), seeds N properties with ~2 confirmed bookings each, times `reindex` into an empty index
 * and again when everything is current, then serves the API on 127.0.0.1 and times GET /search
 * over real HTTP, one request at a time, for a mix of queries (text, filters, dates, next pages).
 */

const USAGE = `usage: npm run measure:search -- [--properties N] [--requests N]

Seeds N properties (about 2 confirmed bookings each), times reindex into an empty index and into a
current one, then times GET /search over HTTP on 127.0.0.1, one request at a time, for a mix of
queries. Prints the figures; writes no files.

  --properties N    properties to seed, 1 to 1000000 (default 10000)
  --requests N      timed search requests, 1 to 1000000 (default 2000)
  -h, --help        print this and exit

Environment:
  MEASURE_DATABASE_URL   use this database (its tables are truncated and filled) instead of a
                         throw-away embedded PostgreSQL
`;

const values = parseFlags('measure:search', USAGE, {
  properties: { type: 'string', default: '10000' },
  requests: { type: 'string', default: '2000' },
});
const N = wholeNumber('measure:search', USAGE, 'properties', values.properties, 1, 1_000_000);
const REQUESTS = wholeNumber('measure:search', USAGE, 'requests', values.requests, 1, 1_000_000);

const WORDS = ['sunny', 'quiet', 'cosy', 'modern', 'rustic', 'spacious', 'charming', 'bright', 'historic', 'stylish'];
const KINDS = ['flat', 'loft', 'studio', 'cottage', 'villa', 'cabin', 'house', 'apartment', 'chalet', 'room'];
const FEATURES = ['garden', 'balcony', 'terrace', 'fireplace', 'pool', 'sea view', 'river view', 'sauna', 'courtyard', 'rooftop'];
const CITIES: [string, string][] = [
  ['Lisbon', 'PT'],
  ['Porto', 'PT'],
  ['Madrid', 'ES'],
  ['Seville', 'ES'],
  ['Paris', 'FR'],
  ['Lyon', 'FR'],
  ['Berlin', 'DE'],
  ['Hamburg', 'DE'],
  ['Rome', 'IT'],
  ['Naples', 'IT'],
  ['Vienna', 'AT'],
  ['Prague', 'CZ'],
  ['Krakow', 'PL'],
  ['Dublin', 'IE'],
  ['Ghent', 'BE'],
  ['Utrecht', 'NL'],
  ['Bergen', 'NO'],
  ['Turku', 'FI'],
  ['Aarhus', 'DK'],
  ['Split', 'HR'],
];

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);

/** N properties with about two confirmed stays each, then ANALYZE. */
async function seed(db: Database): Promise<void> {
  process.stdout.write(`seeding ${N.toLocaleString('en-US')} properties…\n`);
  await db.pool.query(`truncate search_documents, bookings, properties, users restart identity cascade`);
  const {
    rows: [host],
  } = await db.pool.query<{ id: string }>(
    `insert into users (email, name, role, password_hash) values ('measure-host@example.test', 'Host', 'host', 'x') returning id`,
  );
  const {
    rows: [guest],
  } = await db.pool.query<{ id: string }>(
    `insert into users (email, name, role, password_hash) values ('measure-guest@example.test', 'Guest', 'guest', 'x') returning id`,
  );
  // Deterministic variety: title = adjective + kind + feature, 20 cities, prices 40–400 €, 1–10 guests.
  await db.pool.query(
    `insert into properties (host_id, title, description, city, country, nightly_price, max_guests)
     select $1,
            initcap(($2::text[])[1 + i % 10] || ' ' || ($3::text[])[1 + (i / 10) % 10] || ' with ' || ($4::text[])[1 + (i / 100) % 10]) || ' #' || i,
            'A ' || ($2::text[])[1 + (i / 7) % 10] || ' place near the ' || ($4::text[])[1 + (i / 3) % 10]
              || '. Walk to the old town, cafés and the market; good for families and remote work.',
            ($5::text[])[1 + i % 20], ($6::text[])[1 + i % 20],
            4000 + (i * 37) % 36000, 1 + i % 10
     from generate_series(1, $7::int) as i`,
    [host?.id, WORDS, KINDS, FEATURES, CITIES.map((c) => c[0]), CITIES.map((c) => c[1]), N],
  );
  // Two confirmed stays per property in the next 60 days, at offsets that vary by property.
  await db.pool.query(
    `insert into bookings (property_id, guest_id, check_in, check_out, guests, currency, nights, nightly_price, subtotal, cleaning_fee, service_fee, total)
     select p.id, $1, current_date + s.start, current_date + s.start + 3, 1, 'EUR', 3, p.nightly_price, 3 * p.nightly_price, 0, 0, 3 * p.nightly_price
     from properties p cross join lateral (values ((p.id % 20)::int), ((30 + p.id % 25)::int)) as s(start)`,
    [guest?.id],
  );
  await db.pool.query('analyze');
}

/** reindex into an empty index, then again when everything is current. */
async function timeReindex(db: Database, searchIndex: SearchIndex): Promise<void> {
  const cold = await reindex({ db: db.db, searchIndex, batchSize: 500 });
  const warm = await reindex({ db: db.db, searchIndex, batchSize: 500 });
  await db.pool.query('analyze search_documents');
  const rate = (s: typeof cold) => Math.round((s.done / s.elapsedMs) * 1000);
  process.stdout.write(
    `reindex into an empty index: ${cold.done} properties in ${(cold.elapsedMs / 1000).toFixed(2)} s = ${rate(cold)}/s (${cold.written} written)\n` +
      `reindex when current:        ${warm.done} properties in ${(warm.elapsedMs / 1000).toFixed(2)} s = ${rate(warm)}/s (${warm.written} written)\n`,
  );
}

/** GET /search over HTTP, one request at a time, for the mix of queries; the figures to stdout. */
async function timeSearch(base: string): Promise<void> {
  const mix: [string, () => string][] = [
    ['q (one word)', () => `q=${FEATURES[Math.floor(Math.random() * 10)]!.split(' ')[0]}`],
    ['q + city', () => `q=${KINDS[Math.floor(Math.random() * 10)]}&city=${CITIES[Math.floor(Math.random() * 20)]![0]}`],
    ['filters only', () => `country=${CITIES[Math.floor(Math.random() * 20)]![1]}&guests=4&minPrice=10000&maxPrice=20000`],
    ['q + dates', () => `q=${WORDS[Math.floor(Math.random() * 10)]}&checkIn=${day(5)}&checkOut=${day(9)}&guests=2`],
    ['city + dates', () => `city=${CITIES[Math.floor(Math.random() * 20)]![0]}&checkIn=${day(10)}&checkOut=${day(12)}`],
    ['no filter', () => ``],
  ];
  const get = async (qs: string) => {
    const res = await fetch(`${base}/search?${qs}`);
    if (res.status !== 200) throw new Error(`GET /search?${qs}: ${res.status} ${await res.text()}`);
    return (await res.json()) as { items: unknown[]; nextCursor: string | null };
  };
  for (let i = 0; i < 60; i++) await get(mix[i % mix.length]![1]()); // warm-up

  const all: number[] = [];
  const byKind = new Map<string, number[]>();
  const record = (kind: string, ms: number) => {
    all.push(ms);
    byKind.set(kind, [...(byKind.get(kind) ?? []), ms]);
  };
  for (let i = 0; i < REQUESTS; i++) {
    const [kind, make] = mix[i % mix.length]!;
    const qs = make();
    let started = performance.now();
    const page = await get(qs);
    record(kind, performance.now() - started);
    if (page.nextCursor && i % 4 === 0) {
      started = performance.now();
      await get(`${qs}${qs ? '&' : ''}cursor=${page.nextCursor}`);
      record('next page', performance.now() - started);
    }
  }

  const line = (label: string, xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return `  ${label.padEnd(14)} n=${String(s.length).padStart(5)}  median ${fmt(pct(s, 50))}  p99 ${fmt(pct(s, 99))}\n`;
  };
  process.stdout.write(`GET /search over HTTP on 127.0.0.1, sequential, ${N.toLocaleString('en-US')} properties:\n`);
  process.stdout.write(line('all', all));
  for (const [kind, xs] of byKind) process.stdout.write(line(kind, xs));
}

async function main() {
  let server: ThrowawayPostgres | undefined;
  let url = process.env.MEASURE_DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ name: 'measure' });
    url = await server.createDatabase('measure');
  }
  registerOutboxHooks();
  await runMigrations(url);
  const config = loadConfig({ DATABASE_URL: url, LOG_LEVEL: 'silent' });
  const db = createDatabase(url, { max: 10, applicationName: 'measure' });
  const searchIndex = createPostgresSearchIndex({
    url,
    max: config.SEARCH_POOL_MAX,
    statementTimeoutMs: config.SEARCH_STATEMENT_TIMEOUT_MS,
  });

  try {
    await seed(db);
    await timeReindex(db, searchIndex);
    const app = await buildApp({ config, logger: pino({ level: 'silent' }), db, searchIndex });
    await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      await timeSearch(`http://127.0.0.1:${(app.server.address() as net.AddressInfo).port}`);
    } finally {
      await app.close();
    }
  } finally {
    await searchIndex.close();
    await db.close();
    await server?.stop();
  }
}

main().catch((err) => {
  process.stderr.write(`measure failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
