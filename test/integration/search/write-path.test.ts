import net from 'node:net';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { buildTestApp, LogCapture, listProperty, signUp, testConfig, type Session } from '../../helpers/app.ts';
import { waitFor } from '../../helpers/wait.ts';
import { createDirectIndexer } from '../../../src/search/direct-index.ts';
import { createPostgresSearchIndex, type PostgresSearchIndex } from '../../../src/search/postgres-search-index.ts';
import type { SearchDocument, TruthReader } from '../../../src/search/search-index.ts';
import { indexProperties, truthReader } from '../../../src/search/source.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { searchIndexPropertyHandler } from '../../../src/worker/handlers/search-index-property.ts';
import type { PayloadOf } from '../../../src/messages/topics.ts';

/*
 * The index path: a save commits with its property.changed row; the direct write after it is an
 * optimisation that may fail or be slow without the save noticing; the worker's handler repairs
 * the index from the row, whatever order its messages come in.
 */

let db: TestDatabase;
let index: PostgresSearchIndex;
const quietLog = pino({ level: 'silent' });

beforeAll(async () => {
  db = await createTestDatabase();
  index = createPostgresSearchIndex({ url: db.url, max: 4 });
});
afterAll(async () => {
  await index.close();
  await db.drop();
});

/** A port on this machine that nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise((r) => srv.close(r));
  return port;
}

async function doc(propertyId: string) {
  const { rows } = await db.pool.query(
    `select title, max_guests, source_updated_at, indexed_at from search_documents where property_id = $1`,
    [propertyId],
  );
  return rows[0] as { title: string; max_guests: number; source_updated_at: Date; indexed_at: Date } | undefined;
}

async function messagesFor(propertyId: string) {
  const { rows } = await db.pool.query(
    `select public_id, payload, status from outbox where topic = 'property.changed' and key = $1 order by id`,
    [propertyId],
  );
  return rows as { public_id: string; payload: PayloadOf<'property.changed'>; status: string }[];
}

const handler = () => searchIndexPropertyHandler({ db: db.db, searchIndex: index });
const handle = (m: { public_id: string; payload: PayloadOf<'property.changed'> }) =>
  handler().handle({
    messageId: m.public_id,
    topic: 'property.changed',
    key: m.payload.propertyId,
    attempt: 1,
    payload: m.payload,
    log: quietLog,
    signal: new AbortController().signal,
    occurredAt: new Date(),
  });

async function runWorkerUntilEmpty() {
  const worker = createConfiguredWorker({
    db: db.db,
    config: testConfig(db),
    registry: new HandlerRegistry([searchIndexPropertyHandler({ db: db.db, searchIndex: index })]),
    logger: quietLog,
    listen: false,
    housekeeping: false,
  });
  await worker.runUntilEmpty();
  return worker.stop();
}

const patch = (app: Awaited<ReturnType<typeof buildTestApp>>['app'], host: Session, id: string, payload: object) =>
  app.inject({ method: 'PATCH', url: `/properties/${id}`, headers: host.auth, payload });

describe('a broken index never fails or slows a save', () => {
  it('index unreachable (closed port): PATCH is 200, the message exists, the worker repairs the index', async () => {
    const url = new URL(db.url);
    url.port = String(await closedPort());
    const broken = createPostgresSearchIndex({ url: url.toString(), statementTimeoutMs: 500 });
    const logs = new LogCapture();
    const direct = createDirectIndexer({
      db: db.db,
      searchIndex: broken,
      log: pino({ level: 'info' }, logs),
      timeoutMs: 250,
      cooldownMs: 0, // every save tries, so every save is measured against the broken index
    });
    const t = await buildTestApp(db, {}, { searchIndex: broken, afterPropertyCommit: direct.afterPropertyCommit });
    try {
      const host = await signUp(t.app, 'host');
      const property = await listProperty(t.app, host, { title: 'Harbour loft' });

      // That the save never waits longer than its budget for the direct write is the next test's
      // (a write held by a lock, checked by the order of events); a stopwatch here would measure
      // the machine's load more than the refused connection.
      const res = await patch(t.app, host, property.id, { title: 'Harbour loft, renovated', maxGuests: 6 });
      expect(res.statusCode, res.body).toBe(200);
      await direct.drain();

      expect(logs.text).toContain('direct search-index write failed');
      const messages = await messagesFor(property.id);
      expect(messages.map((m) => m.payload.reason)).toEqual(['created', 'updated']);
      expect(await doc(property.id)).toBeUndefined();

      // Search itself is unavailable while its index is: a 503 problem, not a 500.
      const search = await t.app.inject({ method: 'GET', url: '/search?q=harbour' });
      expect(search.statusCode).toBe(503);
      expect(search.json().code).toBe('service_unavailable');

      // The worker, with a working index, repairs it from the outbox rows.
      const summary = await runWorkerUntilEmpty();
      expect(summary.done).toBe(2);
      expect((await messagesFor(property.id)).map((m) => m.status)).toEqual(['DONE', 'DONE']);
      expect(await doc(property.id)).toMatchObject({ title: 'Harbour loft, renovated', max_guests: 6 });
    } finally {
      await t.app.close();
      await direct.drain();
      await broken.close();
    }
  });

  it('index table locked: PATCH answers while the direct write is still blocked, and the index catches up', async () => {
    // A statement timeout longer than the test: the blocked direct write can only end when the
    // lock is released, which happens after the PATCH has answered. An answer that waited for it
    // could not come at all.
    const slow = createPostgresSearchIndex({ url: db.url, statementTimeoutMs: 120_000 });
    const logs = new LogCapture();
    const direct = createDirectIndexer({ db: db.db, searchIndex: slow, log: pino({ level: 'info' }, logs), timeoutMs: 200 });
    const t = await buildTestApp(db, {}, { searchIndex: slow, afterPropertyCommit: direct.afterPropertyCommit });
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      const host = await signUp(t.app, 'host');
      const property = await listProperty(t.app, host, { title: 'Mill house' });
      await direct.drain();
      expect(await doc(property.id)).toMatchObject({ title: 'Mill house' }); // the direct write works when healthy

      await locker.query('begin');
      await locker.query('lock table search_documents in access exclusive mode');
      const answer = patch(t.app, host, property.id, { title: 'Mill house by the weir' });
      // Only a guard against a hang, not a speed check (the lock is held until after the answer).
      let guard: NodeJS.Timeout | undefined;
      const res = await Promise.race([
        answer,
        new Promise<never>((_, reject) => {
          guard = setTimeout(() => reject(new Error('PATCH waited for the locked search index')), 20_000);
        }),
      ]).finally(() => clearTimeout(guard));
      expect(res.statusCode, res.body).toBe(200);
      expect(logs.text).toContain('direct search-index write is slow');
      // The order of events: the save has answered, and its direct write is seen waiting for the
      // lock afterwards (on a busy machine it may reach the lock only after the answer): a write
      // that is still to finish cannot have been waited for.
      await waitFor(
        async () => {
          const { rows: blocked } = await db.pool.query<{ n: number }>(
            `select count(*)::int as n from pg_locks
            where locktype = 'relation' and relation = 'search_documents'::regclass and not granted`,
          );
          return blocked[0]!.n >= 1;
        },
        20_000,
        'the direct write to wait for the locked index after the PATCH answered',
      );
      await locker.query('rollback');

      await direct.drain();
      await runWorkerUntilEmpty();
      expect(await doc(property.id)).toMatchObject({ title: 'Mill house by the weir' });
    } finally {
      await locker.end();
      await t.app.close();
      await direct.drain();
      await slow.close();
    }
  });
});

describe('the handler: idempotent, order-independent', () => {
  let host: Session;
  let app: Awaited<ReturnType<typeof buildTestApp>>['app'];
  beforeAll(async () => {
    // No direct write here: only the handler writes the index.
    app = (await buildTestApp(db, {}, { searchIndex: index })).app;
    host = await signUp(app, 'host');
  });
  afterAll(async () => {
    await app.close();
  });

  it('a property changed twice quickly ends up with its latest state, whatever order the messages are handled in', async () => {
    const property = await listProperty(app, host, { title: 'Version 0' });
    await patch(app, host, property.id, { title: 'Version 1' });
    await patch(app, host, property.id, { title: 'Version 2', maxGuests: 3 });
    const messages = await messagesFor(property.id);
    expect(messages).toHaveLength(3);

    for (const order of [
      [2, 1, 0],
      [1, 2, 0],
      [0, 1, 2],
    ]) {
      await db.pool.query('delete from search_documents where property_id = $1', [property.id]);
      for (const i of order) await handle(messages[i]!);
      expect(await doc(property.id), `order ${order.join(',')}`).toMatchObject({ title: 'Version 2', max_guests: 3 });
    }
    // All at once, and each twice (redelivery).
    await db.pool.query('delete from search_documents where property_id = $1', [property.id]);
    await Promise.all([...messages, ...messages].map(handle));
    expect(await doc(property.id)).toMatchObject({ title: 'Version 2', max_guests: 3 });
  });

  it('handling a message again changes nothing, not even indexed_at', async () => {
    const property = await listProperty(app, host, { title: 'Stable cabin' });
    const [m] = await messagesFor(property.id);
    await handle(m!);
    const first = await doc(property.id);
    await handle(m!);
    expect(await doc(property.id)).toEqual(first);
  });

  it('deactivation removes the document; reactivation brings it back', async () => {
    const property = await listProperty(app, host, { title: 'Seasonal chalet' });
    await patch(app, host, property.id, { active: false });
    for (const m of await messagesFor(property.id)) await handle(m);
    expect(await doc(property.id)).toBeUndefined();
    await patch(app, host, property.id, { active: true });
    const messages = await messagesFor(property.id);
    await handle(messages[1]!); // an older message, handled late: the row decides, not the message
    expect(await doc(property.id)).toMatchObject({ title: 'Seasonal chalet' });
  });

  it('an upsert never replaces a document built from a newer row', async () => {
    const property = await listProperty(app, host, { title: 'Old title' });
    const truth = await truthReader(db.db)([property.id]);
    const older = truth.get(property.id)!;
    await patch(app, host, property.id, { title: 'New title' });
    const newer = (await truthReader(db.db)([property.id])).get(property.id)!;
    expect(newer.sourceUpdatedAt > older.sourceUpdatedAt).toBe(true);

    expect(await index.upsert(newer)).toEqual({ written: true });
    expect(await index.upsert(older)).toEqual({ written: false });
    expect(await doc(property.id)).toMatchObject({ title: 'New title' });
    expect(await index.upsert(newer)).toEqual({ written: false }); // same again: nothing written
    // Same version, different content (drift): repaired.
    expect(await index.upsert({ ...newer, title: 'Corrupted' } satisfies SearchDocument)).toEqual({ written: true });
    expect(await index.upsert(newer)).toEqual({ written: true });
    expect(await doc(property.id)).toMatchObject({ title: 'New title' });
  });

  it('a stale "active" write that read the row before a deactivation cannot resurrect the document', async () => {
    const property = await listProperty(app, host, { title: 'Race villa' });
    await indexProperties(db.db, index, [property.id]);
    expect(await doc(property.id)).toBeDefined();

    // Writer A reads the row (active) and then stalls before writing.
    let readDone!: () => void;
    let release!: () => void;
    const aRead = new Promise<void>((r) => (readDone = r));
    const gate = new Promise<void>((r) => (release = r));
    const stalling: TruthReader = async (ids) => {
      const truth = await truthReader(db.db)(ids);
      readDone();
      await gate;
      return truth;
    };
    const a = index.sync([property.id], stalling);
    await aRead;

    // Meanwhile the host deactivates it, and writer B (the handler of that change) runs.
    await patch(app, host, property.id, { active: false });
    const b = indexProperties(db.db, index, [property.id]);
    // B is seen waiting for A's per-document lock before A goes on (no sleep: a B that never
    // waited, or had not started yet, would prove nothing).
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_locks l join pg_database d on d.oid = l.database
          where d.datname = current_database() and l.locktype = 'advisory' and not l.granted`,
        );
        return rows[0]!.n >= 1;
      },
      30_000,
      'writer B to wait for the document lock',
    );
    release();
    await Promise.all([a, b]);

    // B waited for A's per-document lock, then read the row after it: the document is gone.
    expect(await doc(property.id)).toBeUndefined();
  });
});
