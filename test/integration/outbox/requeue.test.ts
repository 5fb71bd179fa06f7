import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import * as schema from '../../../src/db/schema.ts';
import { OUTBOX_CHANNEL, requeueDead } from '../../../src/outbox/index.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';

/* Requeueing dead messages wakes the worker AFTER its COMMIT, on the channel constant. */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('requeue');
});
afterAll(async () => {
  await tdb?.drop();
});

describe('requeueDead', () => {
  it('sends its NOTIFY on the outbox channel after the COMMIT, not inside the transaction', async () => {
    const [m] = await insertMessages(tdb.db, [{ topic: 'test.dead' }]);
    await tdb.db.execute(sql`update outbox set status = 'DEAD', processed_at = now() where id = ${m!.id}`);

    // Every statement the requeue sends, in order.
    const pool = new pg.Pool({ connectionString: tdb.url, max: 2 });
    const statements: string[] = [];
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...a: unknown[]) => unknown;
      (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...args: unknown[]) => {
        const q = args[0];
        statements.push((typeof q === 'string' ? q : (q as { text: string }).text).trim().toLowerCase());
        return query(...args);
      };
    });
    const listener = new pg.Client({ connectionString: tdb.url });
    await listener.connect();
    const heard: { channel: string; payload?: string }[] = [];
    listener.on('notification', (n) => heard.push({ channel: n.channel, payload: n.payload }));
    await listener.query(`listen ${OUTBOX_CHANNEL}`);
    try {
      const res = await requeueDead(drizzle(pool, { schema }), { ids: [m!.public_id] }, { label: 'test' });
      expect(res.affected).toBe(1);
      const commit = statements.findIndex((s) => s === 'commit');
      const notify = statements.findIndex((s) => s.includes('pg_notify'));
      expect(commit).toBeGreaterThan(-1);
      expect(notify).toBeGreaterThan(commit);
      await waitFor(async () => heard.length > 0, 30_000, 'the wake-up notification');
      expect(heard).toEqual([{ channel: OUTBOX_CHANNEL, payload: 'requeue' }]);
    } finally {
      await listener.end();
      await pool.end();
    }
  });
});
