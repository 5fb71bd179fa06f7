import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction } from '../../src/db/transaction.ts';
import { enqueue } from '../../src/outbox/enqueue.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

let db: TestDatabase;
let listener: pg.Client;
const heard: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  listener = new pg.Client({ connectionString: db.url });
  await listener.connect();
  listener.on('notification', (n) => heard.push(n.payload ?? ''));
  await listener.query('listen outbox');
});
afterAll(async () => {
  await listener.end();
  await db.drop();
});

const payload = () => ({ propertyId: randomUUID(), reason: 'updated' as const });
const settle = () => new Promise((r) => setTimeout(r, 300));
const count = async () => (await db.pool.query('select count(*)::int n from outbox')).rows[0].n as number;

describe('enqueue', () => {
  it('writes the row in the caller’s transaction and wakes the worker once, after the commit', async () => {
    heard.length = 0;
    const before = await count();
    await withTransaction(db.db, async (tx) => {
      const a = await enqueue(tx, 'property.changed', payload());
      const b = await enqueue(tx, 'property.changed', payload());
      expect(b.id).toBeGreaterThan(a.id);
      // Not committed yet: nobody else sees the rows, and nobody has been woken.
      expect(await count()).toBe(before);
      await settle();
      expect(heard).toEqual([]);
    });
    expect(await count()).toBe(before + 2);
    await settle();
    expect(heard).toEqual(['property.changed']);
  });

  it('a rolled-back transaction leaves no row and wakes nobody', async () => {
    heard.length = 0;
    const before = await count();
    await expect(
      withTransaction(db.db, async (tx) => {
        await enqueue(tx, 'property.changed', payload());
        throw new Error('the business change failed');
      }),
    ).rejects.toThrow('the business change failed');
    await settle();
    expect(await count()).toBe(before);
    expect(heard).toEqual([]);
  });

  it('inside a transaction it did not start, the notify goes in the transaction (delivered at COMMIT)', async () => {
    heard.length = 0;
    await db.db.transaction(async (tx) => {
      await enqueue(tx, 'property.changed', payload());
    });
    await settle();
    expect(heard).toEqual(['property.changed']);
  });

  it('refuses a payload that does not match its topic, writing nothing', async () => {
    const before = await count();
    await expect(
      withTransaction(db.db, (tx) => enqueue(tx, 'property.changed', { propertyId: 'not-a-uuid' } as never)),
    ).rejects.toThrow();
    expect(await count()).toBe(before);
  });
});
