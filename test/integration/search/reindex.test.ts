import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, listProperty, signUp, type TestApp } from '../../helpers/app.ts';
import { createPostgresSearchIndex, type PostgresSearchIndex } from '../../../src/search/postgres-search-index.ts';
import { reindex, type ReindexProgress } from '../../../src/search/reindex.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * `npm run reindex`: rebuilds in place from the properties table. Properties are created through
 * the API (this app has no direct write hook, so the index starts empty).
 */

let db: TestDatabase;
let t: TestApp;
let index: PostgresSearchIndex;
const TOTAL = 60;
const INACTIVE = 6;

beforeAll(async () => {
  db = await createTestDatabase();
  index = createPostgresSearchIndex({ url: db.url, max: 4 });
  t = await buildTestApp(db, {}, { searchIndex: index });
  const host = await signUp(t.app, 'host');
  const cities = ['Lyon', 'Nantes', 'Lille'];
  for (let i = 0; i < TOTAL; i++) {
    await listProperty(t.app, host, {
      title: `Reindex ${i % 2 ? 'garden flat' : 'attic room'} ${i}`,
      description: i % 3 ? 'Near the garden market.' : 'Quiet street.',
      city: cities[i % 3],
      country: 'FR',
      nightlyPrice: 5_000 + i * 100,
      maxGuests: 1 + (i % 5),
      active: i >= INACTIVE,
    });
  }
});
afterAll(async () => {
  await t.app.close();
  await index.close();
  await db.drop();
});

const QUERIES = ['q=garden', 'q=attic&city=lyon', 'city=Nantes&guests=3', 'minPrice=6000&maxPrice=8000&limit=5', 'q=reindex&limit=100'];

async function snapshot() {
  const out: Record<string, unknown> = {};
  for (const qs of QUERIES) {
    const res = await t.app.inject({ method: 'GET', url: `/search?${qs}` });
    expect(res.statusCode).toBe(200);
    out[qs] = res.json();
  }
  return out;
}

const documents = async () => (await db.pool.query('select *, document::text as document from search_documents order by property_id')).rows;

describe('reindex', () => {
  it('builds the index from the table, then restores identical results after the table is emptied', async () => {
    const first = await reindex({ db: db.db, searchIndex: index, batchSize: 7 });
    expect(first).toMatchObject({ interrupted: false, done: TOTAL, total: TOTAL, written: TOTAL - INACTIVE, removed: 0 });
    expect(first.documents).toBe(TOTAL - INACTIVE);
    const before = await snapshot();
    expect((before['q=reindex&limit=100'] as { items: unknown[] }).items).toHaveLength(TOTAL - INACTIVE);

    await db.pool.query('delete from search_documents');
    expect((await snapshot())['q=garden']).toEqual({ items: [], nextCursor: null });

    await reindex({ db: db.db, searchIndex: index, batchSize: 7 });
    expect(await snapshot()).toEqual(before);
  });

  it('run twice, changes nothing the second time (not even indexed_at)', async () => {
    await reindex({ db: db.db, searchIndex: index });
    const docs = await documents();
    const again = await reindex({ db: db.db, searchIndex: index, batchSize: 11 });
    expect(again).toMatchObject({ written: 0, removed: 0, unchanged: TOTAL - INACTIVE });
    expect(await documents()).toEqual(docs);
  });

  it('removes documents of inactive and deleted properties, and repairs drifted ones', async () => {
    const { rows } = await db.pool.query(`select public_id from properties where active order by id limit 2`);
    const [deactivated, drifted] = rows.map((r) => r.public_id as string);
    await db.pool.query(`update properties set active = false where public_id = $1`, [deactivated]);
    await db.pool.query(`update search_documents set title = 'wrong' where property_id = $1`, [drifted]);
    const ghost = randomUUID(); // a document whose property does not exist
    await db.pool.query(
      `insert into search_documents (property_id, title, description, city, country, currency, nightly_price, max_guests, source_updated_at)
       values ($1, 'Ghost', '', 'Lyon', 'FR', 'EUR', 100, 2, now())`,
      [ghost],
    );

    const summary = await reindex({ db: db.db, searchIndex: index });
    expect(summary).toMatchObject({ written: 1, removed: 2 });
    const ids = (await documents()).map((d) => d.property_id);
    expect(ids).not.toContain(deactivated);
    expect(ids).not.toContain(ghost);
    expect((await documents()).find((d) => d.property_id === drifted).title).not.toBe('wrong');
    await db.pool.query(`update properties set active = true where public_id = $1`, [deactivated]);
    await reindex({ db: db.db, searchIndex: index });
  });

  it('search never comes back empty or short while it runs', async () => {
    const expected = TOTAL - INACTIVE;
    let running = true;
    const counts: number[] = [];
    const watcher = (async () => {
      while (running) {
        const res = await t.app.inject({ method: 'GET', url: '/search?q=reindex&limit=100' });
        counts.push(res.json().items.length);
      }
    })();
    // Small batches: 20 transactions, with the watcher's searches interleaved between them. On a
    // fast run fewer than three searches may fall inside one: run it again (each time every
    // document drifted, same version, so each batch writes) until three did.
    for (let run = 0; run < 10 && counts.length < 3; run++) {
      await db.pool.query(`update search_documents set description = 'stale'`);
      await reindex({ db: db.db, searchIndex: index, batchSize: 3 });
    }
    running = false;
    await watcher;
    expect(counts.length).toBeGreaterThanOrEqual(3);
    expect(counts.every((c) => c === expected)).toBe(true);
  });

  it('stops after the batch in flight when interrupted, and a later run completes', async () => {
    await db.pool.query('delete from search_documents');
    const stop = new AbortController();
    const progress: ReindexProgress[] = [];
    const summary = await reindex({
      db: db.db,
      searchIndex: index,
      batchSize: 10,
      signal: stop.signal,
      onProgress: (p) => {
        progress.push(p);
        if (p.done === 20) stop.abort();
      },
    });
    expect(summary).toMatchObject({ interrupted: true, done: 20 });
    expect(summary.documents).toBe(20 - INACTIVE); // two whole batches, the first has the 6 inactive
    expect(progress.map((p) => p.done)).toEqual([10, 20]);

    const rest = await reindex({ db: db.db, searchIndex: index, batchSize: 10 });
    expect(rest).toMatchObject({ interrupted: false, written: TOTAL - 20, unchanged: 20 - INACTIVE });
  });

  it('`npm run reindex` without a terminal prints one summary line', async () => {
    const child = spawn(process.execPath, entryArgs('src/commands/reindex.ts', '--batch-size', '25'), {
      env: { ...process.env, DATABASE_URL: db.url, SEARCH_DATABASE_URL: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((r) => child.on('exit', r));
    expect(code, err).toBe(0);
    const lines = out.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^reindex done: ${TOTAL}/${TOTAL} properties in [\\d.]+s \\([\\d,]+/s\\) · 0 written, ${TOTAL - INACTIVE} unchanged, 0 removed · ${TOTAL - INACTIVE} documents in the index$`,
      ),
    );
  });
});
