import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyOnce, type GroupHandler } from '../../../src/events/handle-event.ts';
import type { ConsumedEvent } from '../../../src/events/event.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The consumer's inbox under a real race: two deliveries of one event applied at the same moment
 * (a redelivery racing a slow first attempt on another instance). The first holds its transaction
 * open after its effect; the second must wait on the first's inbox row and then find it, so the
 * effect happens once. A check-then-act inbox (select, apply, insert the processed row after)
 * lets both apply: this is the test that tells the two apart.
 */
let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('events_inbox');
  await tdb.db.execute(sql`create table effect_probe (message_id text not null, n int not null)`);
});
afterAll(async () => {
  await tdb?.drop();
});

const event = (messageId: string): ConsumedEvent => ({
  messageId,
  subject: 'stayhub.booking.created',
  topic: 'booking.created',
  key: null,
  occurredAt: new Date(),
  schemaVersion: 1,
  streamSeq: 1,
  deliveries: 1,
  headers: {},
  body: {},
});

describe('the inbox', () => {
  it('two concurrent applications of one message: one applied, one duplicate, the effect once', async () => {
    const log = pino({ level: 'silent' });
    const id = randomUUID();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered = 0;
    const handle: GroupHandler = async (tx, e) => {
      entered++;
      await tx.execute(sql`insert into effect_probe (message_id, n) values (${e.messageId}, 1)`);
      if (entered === 1) await gate; // the first holds its transaction open after its effect
    };
    const first = applyOnce(tdb.db, 'race', event(id), handle, log);
    await waitFor(async () => entered === 1, 30_000, 'the first application to run its effect');
    const second = applyOnce(tdb.db, 'race', event(id), handle, log);
    // The second is really concurrent: it waits on the first's uncommitted inbox row.
    await waitFor(
      async () => {
        const { rows } = await tdb.db.execute(
          sql`select 1 from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`,
        );
        return rows.length > 0;
      },
      30_000,
      'the second application to wait for the first',
    );
    release();
    const outcomes = (await Promise.all([first, second])).sort();
    expect(outcomes).toEqual(['applied', 'duplicate']);
    expect(entered).toBe(1);
    const { rows } = await tdb.db.execute<{ n: string }>(sql`select count(*) as n from effect_probe where message_id = ${id}`);
    expect(Number(rows[0]!.n)).toBe(1);
  });
});
