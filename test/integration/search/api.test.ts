import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, daysFromNow, listProperty, signUp, type Session, type TestApp } from '../../helpers/app.ts';
import { createPostgresSearchIndex, type PostgresSearchIndex } from '../../../src/search/postgres-search-index.ts';
import { reindex } from '../../../src/search/reindex.ts';
import { encodeSearchCursor } from '../../../src/search/search.schemas.ts';

/*
 * GET /search on real Postgres. Properties are created through the API; the index is brought up
 * to date with reindex() (this app has no direct write hook, so what the index holds is exactly
 * what the test put there).
 */

let db: TestDatabase;
let t: TestApp;
let index: PostgresSearchIndex;
let host: Session;

interface Item {
  property: { id: string; title: string; city: string; country: string; nightlyPrice: number; maxGuests: number };
  rank: number | null;
}
interface Page {
  items: Item[];
  nextCursor: string | null;
}

async function search(query: Record<string, string | number>): Promise<Page> {
  const qs = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
  const res = await t.app.inject({ method: 'GET', url: `/search?${qs}` });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Page;
}

async function searchAll(query: Record<string, string | number>): Promise<Item[]> {
  const all: Item[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 500; pages++) {
    const page: Page = await search(cursor ? { ...query, cursor } : query);
    all.push(...page.items);
    cursor = page.nextCursor;
    if (!cursor) return all;
  }
  throw new Error('more than 500 pages');
}

const sync = () => reindex({ db: db.db, searchIndex: index, batchSize: 100 });

beforeAll(async () => {
  db = await createTestDatabase();
  index = createPostgresSearchIndex({ url: db.url, max: 2 });
  t = await buildTestApp(db, {}, { searchIndex: index });
  host = await signUp(t.app, 'host');
});
afterAll(async () => {
  await t.app.close();
  await index.close();
  await db.drop();
});

describe('GET /search: relevance', () => {
  it('ranks a title match above a city match above a description match, and shows properties as GET /properties/:id does', async () => {
    const inDescription = await listProperty(t.app, host, {
      title: 'Quiet studio',
      description: 'A short walk to the old lighthouse.',
      city: 'Brest',
      country: 'FR',
    });
    const inTitle = await listProperty(t.app, host, {
      title: 'Lighthouse keeper cottage',
      description: 'Stone walls.',
      city: 'Brest',
      country: 'FR',
    });
    const inCity = await listProperty(t.app, host, { title: 'Loft', description: 'Bright.', city: 'Lighthouse', country: 'FR' });
    await listProperty(t.app, host, { title: 'Unrelated place', description: 'Nothing to see.', city: 'Brest', country: 'FR' });
    await sync();

    const { items, nextCursor } = await search({ q: 'lighthouse' });
    expect(items.map((i) => i.property.id)).toEqual([inTitle.id, inCity.id, inDescription.id]);
    expect(items[0]!.rank!).toBeGreaterThan(items[1]!.rank!);
    expect(items[1]!.rank!).toBeGreaterThan(items[2]!.rank!);
    expect(nextCursor).toBeNull();

    const get = await t.app.inject({ method: 'GET', url: `/properties/${inTitle.id}` });
    expect(items[0]!.property).toEqual(get.json());

    // Web-search syntax: a minus excludes.
    const withoutCottage = await search({ q: 'lighthouse -cottage' });
    expect(withoutCottage.items.map((i) => i.property.id)).toEqual([inCity.id, inDescription.id]);
  });

  it('without q lists in id order with rank null', async () => {
    const { items } = await search({ city: 'brest' });
    expect(items.length).toBe(3);
    expect(items.every((i) => i.rank === null)).toBe(true);
    const ids = items.map((i) => i.property.id);
    expect(ids).toEqual([...ids].sort());
  });
});

describe('GET /search: filters', () => {
  const made: Record<string, string> = {};
  beforeAll(async () => {
    const mk = async (name: string, o: Record<string, unknown>) => {
      made[name] = (await listProperty(t.app, host, { title: `Filtertest ${name}`, ...o })).id;
    };
    await mk('lisbonSmallCheap', { city: 'Lisbon', country: 'PT', maxGuests: 2, nightlyPrice: 5_000 });
    await mk('lisbonBigDear', { city: 'Lisbon', country: 'PT', maxGuests: 8, nightlyPrice: 30_000 });
    await mk('madridMid', { city: 'Madrid', country: 'ES', maxGuests: 4, nightlyPrice: 12_000 });
    await mk('lisbonTexas', { city: 'Lisbon', country: 'US', maxGuests: 6, nightlyPrice: 12_000 });
    await sync();
  });
  const ids = async (q: Record<string, string | number>) => (await searchAll({ q: 'filtertest', ...q })).map((i) => i.property.id).sort();
  const of = (...names: string[]) => names.map((n) => made[n]!).sort();

  it('city (case-insensitive)', async () => {
    expect(await ids({ city: 'LISBON' })).toEqual(of('lisbonSmallCheap', 'lisbonBigDear', 'lisbonTexas'));
  });
  it('country (case-insensitive)', async () => {
    expect(await ids({ country: 'pt' })).toEqual(of('lisbonSmallCheap', 'lisbonBigDear'));
    expect(await ids({ city: 'Lisbon', country: 'US' })).toEqual(of('lisbonTexas'));
  });
  it('guests: properties that take at least that many', async () => {
    expect(await ids({ guests: 6 })).toEqual(of('lisbonBigDear', 'lisbonTexas'));
    expect(await ids({ guests: 8 })).toEqual(of('lisbonBigDear'));
    expect(await ids({ guests: 9 })).toEqual([]);
  });
  it('minPrice and maxPrice, inclusive', async () => {
    expect(await ids({ minPrice: 12_000 })).toEqual(of('lisbonBigDear', 'madridMid', 'lisbonTexas'));
    expect(await ids({ maxPrice: 12_000 })).toEqual(of('lisbonSmallCheap', 'madridMid', 'lisbonTexas'));
    expect(await ids({ minPrice: 12_000, maxPrice: 12_000 })).toEqual(of('madridMid', 'lisbonTexas'));
  });
  it('filters combine, with and without q', async () => {
    expect(await ids({ city: 'lisbon', guests: 3, maxPrice: 20_000 })).toEqual(of('lisbonTexas'));
    const noQ = (await searchAll({ city: 'lisbon', guests: 3, maxPrice: 20_000 })).map((i) => i.property.id);
    expect(noQ).toEqual(of('lisbonTexas'));
  });

  it('a deactivated property disappears at once, even before the index hears of it', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/properties/${made.madridMid}`,
      headers: host.auth,
      payload: { active: false },
    });
    expect(res.statusCode).toBe(200);
    // No hook in this app and no worker: the index still holds the document…
    expect((await index.listIds(null, 1000)).includes(made.madridMid!)).toBe(true);
    // …but search re-checks the truth.
    expect(await ids({})).toEqual(of('lisbonSmallCheap', 'lisbonBigDear', 'lisbonTexas'));
    await sync();
    expect((await index.listIds(null, 1000)).includes(made.madridMid!)).toBe(false);
  });

  it('a lagging index never makes a result contradict the filters (they are re-checked against the row)', async () => {
    await t.app.inject({
      method: 'PATCH',
      url: `/properties/${made.lisbonSmallCheap}`,
      headers: host.auth,
      payload: { nightlyPrice: 50_000 },
    });
    // The index still says 5,000: it proposes the property, the truth rejects it.
    expect(await ids({ maxPrice: 10_000 })).toEqual([]);
    await sync();
    expect(await ids({ minPrice: 40_000 })).toEqual(of('lisbonSmallCheap'));
  });
});

describe('GET /search: pagination', () => {
  const created: string[] = [];
  beforeAll(async () => {
    for (let i = 0; i < 120; i++) {
      // Three rank tiers (title, title+description, description only) and many exact ties
      // within each: ties are what keyset pagination must break by id.
      const tier = i % 3;
      const p = await listProperty(t.app, host, {
        title: tier === 2 ? `Flat number ${i}` : `Pagetest flat ${i}`,
        description: tier === 0 ? 'Quiet.' : 'A pagetest pagetest description.',
        city: 'Pagetown',
        country: 'DE',
        maxGuests: 1 + (i % 6),
      });
      created.push(p.id);
    }
    await sync();
  });

  it('walks 120 properties in id order, each exactly once, for several page sizes', async () => {
    for (const limit of [1, 7, 20, 100]) {
      const got = (await searchAll({ city: 'Pagetown', limit })).map((i) => i.property.id);
      expect(got.length).toBe(120);
      expect(new Set(got).size).toBe(120);
      expect(got).toEqual([...created].sort());
    }
  });

  it('walks them in rank order with ties, each exactly once', async () => {
    const oneShot = (await search({ q: 'pagetest', limit: 100 })).items.length;
    expect(oneShot).toBe(100);
    const items = await searchAll({ q: 'pagetest', limit: 11 });
    expect(items.length).toBe(120);
    expect(new Set(items.map((i) => i.property.id)).size).toBe(120);
    // Non-increasing rank, and ids ascending within equal ranks.
    for (let i = 1; i < items.length; i++) {
      const [a, b] = [items[i - 1]!, items[i]!];
      expect(a.rank!).toBeGreaterThanOrEqual(b.rank!);
      if (a.rank === b.rank) expect(a.property.id < b.property.id).toBe(true);
    }
    expect(new Set(items.map((i) => i.rank)).size).toBeGreaterThanOrEqual(3);
  });

  it('pages with a filter the index cannot answer (dates) still return each exactly once', async () => {
    const items = await searchAll({ city: 'Pagetown', guests: 4, checkIn: daysFromNow(30), checkOut: daysFromNow(32), limit: 9 });
    const expected = created.filter((_, i) => 1 + (i % 6) >= 4).sort();
    expect(items.map((i) => i.property.id)).toEqual(expected);
  });

  it('the last page has nextCursor null, and an exact multiple does not leave an empty page', async () => {
    const page = await search({ city: 'Pagetown', limit: 100 });
    expect(page.items.length).toBe(100);
    const last = await search({ city: 'Pagetown', limit: 20, cursor: page.nextCursor! });
    expect(last.items.length).toBe(20);
    expect(last.nextCursor).toBeNull();
  });
});

describe('GET /search: availability against the bookings table', () => {
  let property: string;
  let other: string;
  beforeAll(async () => {
    property = (await listProperty(t.app, host, { title: 'Availtest house', city: 'Availville', country: 'IT' })).id;
    other = (await listProperty(t.app, host, { title: 'Availtest other', city: 'Availville', country: 'IT' })).id;
    const guest = await signUp(t.app, 'guest');
    const book = async (checkIn: string, checkOut: string) => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/bookings',
        headers: guest.auth,
        payload: { propertyId: property, checkIn, checkOut, guests: 2 },
      });
      expect(res.statusCode, res.body).toBe(201);
      return res.json().id as string;
    };
    // Back to back: [d10, d13) and [d13, d16). A cancelled stay [d20, d25) frees its dates.
    await book(daysFromNow(10), daysFromNow(13));
    await book(daysFromNow(13), daysFromNow(16));
    const cancelled = await book(daysFromNow(20), daysFromNow(25));
    const res = await t.app.inject({ method: 'POST', url: `/bookings/${cancelled}/cancel`, headers: guest.auth });
    expect(res.statusCode, res.body).toBe(200);
    await sync();
  });

  const free = async (from: number, to: number) => {
    const ids = (await searchAll({ city: 'Availville', checkIn: daysFromNow(from), checkOut: daysFromNow(to) })).map((i) => i.property.id);
    expect(ids).toContain(other);
    return ids.includes(property);
  };

  it('is exact at the boundaries of half-open stays', async () => {
    expect(await free(7, 10)).toBe(true); // checks out the day the first guest checks in
    expect(await free(16, 18)).toBe(true); // checks in the day the second guest checks out
    expect(await free(9, 11)).toBe(false); // overlaps the first stay's first night
    expect(await free(12, 13)).toBe(false); // the first stay's last night
    expect(await free(13, 14)).toBe(false); // the second stay's first night
    expect(await free(15, 16)).toBe(false); // the second stay's last night
    expect(await free(12, 14)).toBe(false); // straddles the changeover
    expect(await free(5, 30)).toBe(false); // contains both
    expect(await free(20, 25)).toBe(true); // only a cancelled booking there
  });
});

describe('GET /search: bad parameters are 400 problem details', () => {
  const bad: Record<string, string> = {
    'guests=0': 'guests',
    'guests=abc': 'guests',
    'guests=2.5': 'guests',
    'guests=': 'guests',
    'limit=0': 'limit',
    'limit=101': 'limit',
    'minPrice=-1': 'minPrice',
    'minPrice=500&maxPrice=100': 'maxPrice',
    'country=PRT': 'country',
    'checkIn=2030-01-05': 'checkOut',
    'checkOut=2030-01-05': 'checkIn',
    'checkIn=2030-01-05&checkOut=2030-01-05': 'checkOut',
    'checkIn=2030-01-05&checkOut=2030-01-04': 'checkOut',
    'checkIn=2030-02-30&checkOut=2030-03-04': 'checkIn',
    'checkIn=2030-01-01&checkOut=2031-06-01': 'checkOut',
    'nope=1': '',
    'q=a&q=b': 'q',
    'q=a%00b': 'q',
    'city=Li%00sbon': 'city',
  };
  for (const [qs, field] of Object.entries(bad)) {
    it(`?${qs}`, async () => {
      const res = await t.app.inject({ method: 'GET', url: `/search?${qs}` });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      const body = res.json();
      expect(body.code).toBe('validation_failed');
      if (field) expect(JSON.stringify(body.errors)).toContain(field);
    });
  }

  it('a cursor from a text search cannot continue a list without q, nor the reverse', async () => {
    const rankCursor = encodeSearchCursor({ rank: '0.1', propertyId: '00000000-0000-4000-8000-000000000000' });
    const idCursor = encodeSearchCursor({ propertyId: '00000000-0000-4000-8000-000000000000' });
    expect((await t.app.inject({ method: 'GET', url: `/search?cursor=${rankCursor}` })).statusCode).toBe(400);
    expect((await t.app.inject({ method: 'GET', url: `/search?q=x&cursor=${idCursor}` })).statusCode).toBe(400);
    expect((await t.app.inject({ method: 'GET', url: `/search?q=x&cursor=${rankCursor}` })).statusCode).toBe(200);
  });

  it('odd but valid text is not an error', async () => {
    for (const q of ['"', '!!!', 'a & b | c', "o'brien", '-', '   ']) {
      const res = await t.app.inject({ method: 'GET', url: `/search?q=${encodeURIComponent(q)}` });
      expect(res.statusCode, `${q}: ${res.body}`).toBe(200);
    }
  });
});

describe('GET /search: random query strings', () => {
  it('answer 200 or a 400 problem, never a 5xx (fast-check)', async () => {
    const names = ['q', 'city', 'country', 'guests', 'checkIn', 'checkOut', 'minPrice', 'maxPrice', 'limit', 'cursor', 'x', '__proto__'];
    const value = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary', maxLength: 300 }),
      fc.integer().map(String),
      fc.double().map(String),
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString().slice(0, 10)),
      fc.constantFrom('\u0000', "'; drop table search_documents; --", '!!:*', '"a', 'a <-> b', '(', 'Lisbon', 'PT'),
      fc.string().map((v) => Buffer.from(JSON.stringify({ r: v, i: v })).toString('base64url')),
    );
    await fc.assert(
      fc.asyncProperty(fc.dictionary(fc.constantFrom(...names), value), async (params) => {
        const qs = new URLSearchParams(params as Record<string, string>).toString();
        const res = await t.app.inject({ method: 'GET', url: `/search?${qs}` });
        expect([200, 400], `${qs}: ${res.body}`).toContain(res.statusCode);
        if (res.statusCode === 400) expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      }),
      { numRuns: 300 },
    );
    expect((await db.pool.query('select count(*)::int as n from search_documents')).rows[0].n).toBeGreaterThan(0);
  });
});
