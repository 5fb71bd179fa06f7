import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import { withTransaction } from '../../../src/db/transaction.ts';
import { enqueueTopic } from '../../../src/messages/enqueue.ts';
import { OUTBOX_CHANNEL, type EnqueuedMessage } from '../../../src/outbox/index.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { recordStatements, type LoggedStatement, type StatementLog } from '../../helpers/statement-log.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A listener cannot tell a NOTIFY sent after COMMIT from one sent inside the transaction:
 * PostgreSQL delivers the latter at COMMIT and merges duplicates. So besides what a listener
 * hears, these tests read what was sent (a log of every statement of the pool `enqueue` runs on).
 */

let db: TestDatabase;
/** The pool under test, its statements logged; `db.pool` is left for the test's own queries. */
let traced: Database;
let log: StatementLog;
let listener: pg.Client;
const heard: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  traced = createDatabase(db.url, { max: 2, applicationName: 'stayhub-test-traced' });
  log = recordStatements(traced.pool);
  listener = new pg.Client({ connectionString: db.url });
  await listener.connect();
  listener.on('notification', (n) => heard.push(n.payload ?? ''));
  await listener.query(`listen ${pg.escapeIdentifier(OUTBOX_CHANNEL)}`);
});
afterAll(async () => {
  await listener?.end();
  await traced?.close();
  await db?.drop();
});
beforeEach(() => {
  heard.length = 0;
  log.clear();
});

const payload = () => ({ propertyId: randomUUID(), reason: 'updated' as const });
const count = async () => (await db.pool.query('select count(*)::int n from outbox')).rows[0].n as number;

/**
 * Everything the listener has been sent up to now, without sleeping: a marker notified from
 * another session reaches the listener after every notification committed before it.
 */
async function heardUpToNow(): Promise<string[]> {
  const marker = `marker:${randomUUID()}`;
  await db.pool.query('select pg_notify($1, $2)', [OUTBOX_CHANNEL, marker]);
  await waitFor(async () => heard.includes(marker), 10_000, 'the marker notification');
  return heard.filter((p) => !p.startsWith('marker:'));
}

const normalised = (s: LoggedStatement) => s.text.replace(/\s+/g, ' ').trim().toLowerCase();
const notifies = () => log.statements.filter((s) => /pg_notify/i.test(s.text));
const commitOf = () => {
  const commits = log.statements.filter((s) => normalised(s) === 'commit');
  expect(commits, 'one COMMIT').toHaveLength(1);
  return commits[0]!;
};

describe('enqueue', () => {
  it('writes the rows in the caller’s transaction; alone, it carries the wake-up inside it (delivered at COMMIT)', async () => {
    const before = await count();
    let a!: EnqueuedMessage;
    let b!: EnqueuedMessage;
    await withTransaction(traced.db, async (tx) => {
      a = await enqueueTopic(tx, 'property.changed', payload());
      b = await enqueueTopic(tx, 'property.changed', payload());
      expect(b.id!).toBeGreaterThan(a.id!);
      // Not committed yet: nobody else sees the rows, and nobody has been woken.
      expect(await count()).toBe(before);
      expect(await heardUpToNow()).toEqual([]);
    });
    expect(await count()).toBe(before + 2);
    // Each wake-up names its message (its public id), so an idle worker claims both by id.
    expect(await heardUpToNow()).toEqual([a.publicId, b.publicId]);

    // No other transaction of the process carried one: the notify rode in the inserts, and no
    // statement was spent on it after the COMMIT.
    const commit = commitOf();
    const inserts = log.statements.filter((s) => /insert into outbox/i.test(s.text));
    expect(inserts).toHaveLength(2);
    for (const insert of inserts) {
      expect(insert.text).toMatch(/pg_notify/i);
      expect(insert.endSeq!).toBeLessThan(commit.startSeq);
    }
    expect(notifies().filter((s) => s.startSeq > commit.startSeq)).toEqual([]);
  });

  it('while another transaction carries the wake-up, the others wake the worker once each, after their COMMIT', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let carrying!: () => void;
    const carried = new Promise<void>((r) => (carrying = r));
    // The carrier: its insert (with the notify) is sent, then it waits, uncommitted.
    let carried1!: EnqueuedMessage;
    const carrier = withTransaction(traced.db, async (tx) => {
      carried1 = await enqueueTopic(tx, 'property.changed', payload());
      carrying();
      await held;
    });
    await carried;
    await withTransaction(traced.db, (tx) => enqueueTopic(tx, 'property.changed', payload()));
    // The other's wake-up arrives while the carrier has not committed: it did not ride in a COMMIT
    // still to come, it was sent after its own.
    await waitFor(async () => heard.includes('property.changed'), 10_000, 'the after-commit wake-up');
    release();
    await carrier;
    // The carrier's names its message; the one after a COMMIT, shared by every commit of its moment, only its topic.
    expect(await heardUpToNow()).toEqual(['property.changed', carried1.publicId]);

    const [carrierInsert, otherInsert] = log.statements.filter((s) => /insert into outbox/i.test(s.text));
    expect(carrierInsert!.text).toMatch(/pg_notify/i);
    expect(otherInsert!.text).not.toMatch(/pg_notify/i);
    const otherCommit = log.statements.find(
      (s) => s.connection === otherInsert!.connection && s.startSeq > otherInsert!.startSeq && normalised(s) === 'commit',
    )!;
    const sent = log.statements.filter((s) => /^select pg_notify/i.test(normalised(s)));
    expect(sent.map(normalised), 'one notify, alone in its statement').toEqual([expect.stringMatching(/^select pg_notify\(\$1, \$2\)$/)]);
    expect(sent[0]!.startSeq, 'sent after the COMMIT is answered').toBeGreaterThan(otherCommit.endSeq!);

    // The carrier has ended: the next transaction carries its wake-up inside again.
    log.clear();
    const third = await withTransaction(traced.db, (tx) => enqueueTopic(tx, 'property.changed', payload()));
    expect(log.statements.filter((s) => /insert into outbox/i.test(s.text))[0]!.text).toMatch(/pg_notify/i);
    expect(await heardUpToNow()).toEqual(['property.changed', carried1.publicId, third.publicId]);
  });

  it('a rolled-back transaction leaves no row and wakes nobody', async () => {
    const before = await count();
    await expect(
      withTransaction(traced.db, async (tx) => {
        await enqueueTopic(tx, 'property.changed', payload());
        throw new Error('the business change failed');
      }),
    ).rejects.toThrow('the business change failed');
    expect(await count()).toBe(before);
    expect(await heardUpToNow()).toEqual([]);
    expect(log.statements.map(normalised)).toContain('rollback');
    // The notify rode in the rolled-back insert, and none was sent after it.
    expect(notifies().filter((s) => !/insert into outbox/i.test(s.text))).toEqual([]);

    // The rollback ended the carrier too: the next transaction carries its wake-up inside.
    log.clear();
    const next = await withTransaction(traced.db, (tx) => enqueueTopic(tx, 'property.changed', payload()));
    expect(log.statements.filter((s) => /insert into outbox/i.test(s.text))[0]!.text).toMatch(/pg_notify/i);
    expect(await heardUpToNow()).toEqual([next.publicId]);
  });

  it('inside a transaction it did not start, the notify goes in the transaction (delivered at COMMIT)', async () => {
    const m = await traced.db.transaction((tx) => enqueueTopic(tx, 'property.changed', payload()));
    expect(await heardUpToNow()).toEqual([m.publicId]);
    // No after-commit hook to run it: the notify is sent inside the transaction, before the COMMIT.
    const sent = notifies();
    expect(sent).toHaveLength(1);
    expect(sent[0]!.endSeq!).toBeLessThan(commitOf().startSeq);
  });

  it('refuses a payload that does not match its topic, writing nothing', async () => {
    const before = await count();
    await expect(
      withTransaction(traced.db, (tx) => enqueueTopic(tx, 'property.changed', { propertyId: 'not-a-uuid' } as never)),
    ).rejects.toThrow();
    expect(await count()).toBe(before);
    expect(log.statements.filter((s) => /insert into outbox/i.test(s.text))).toEqual([]);
  });

  it('gives each message a time-ordered id (a UUIDv7 carrying its creation time), increasing with the messages', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const m = await withTransaction(traced.db, (tx) => enqueueTopic(tx, 'property.changed', { propertyId: randomUUID() }));
      ids.push(m.publicId!);
    }
    const { rows } = await db.pool.query<{ version: string; variant: string; lag_ms: number }>(
      `select substring(id::text, 15, 1) as version, substring(id::text, 20, 1) as variant,
              extract(epoch from (now() - uuid_extract_timestamp(id))) * 1000 as lag_ms
         from unnest($1::uuid[]) as id`,
      [ids],
    );
    for (const r of rows) {
      expect(r.version).toBe('7');
      expect(['8', '9', 'a', 'b']).toContain(r.variant); // RFC 9562 variant, as gen_random_uuid's
      expect(Math.abs(r.lag_ms)).toBeLessThan(60_000);
    }
    // Millisecond precision: ids of one millisecond may come in any order, never an earlier ms after a later one.
    const ms = ids.map((id) => parseInt(id.replace(/-/g, '').slice(0, 12), 16));
    expect([...ms].sort((a, b) => a - b)).toEqual(ms);
  });
});
