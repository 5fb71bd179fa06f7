import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createDatabase } from '../../../src/db/client.ts';
import { buildTestApp, daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { recordStatements, type LoggedStatement } from '../../helpers/statement-log.ts';
import { bookingInsert, toBookingRow } from '../../../src/bookings/bookings.repository.ts';
import { insertWithTopicEvent } from '../../../src/messages/enqueue.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { OUTBOX_CHANNEL } from '../../../src/outbox/index.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The booking and its outbox row are written by one prepared statement. The booking path (POST
 * /bookings, in a transaction started by withTransaction) wakes the worker as `enqueue` does: from
 * inside its transaction when no other transaction of the process carries a wake-up, after its
 * COMMIT otherwise (test/integration/outbox/enqueue.test.ts tests both, and says why only the statements
 * sent can tell). A transaction that has no after-commit work (not started by withTransaction)
 * always sends the wake-up inside: delivered at COMMIT, never after a rollback.
 */
const t = useTestApp({ LOG_LEVEL: 'warn' });

async function ids() {
  const host = await signUp(t.app, 'host');
  const guest = await signUp(t.app, 'guest');
  const p = await listProperty(t.app, host);
  const { rows } = await t.db.pool.query<{ pid: string; gid: string }>(
    `select (select id from properties where public_id = $1) as pid, (select id from users where public_id = $2) as gid`,
    [p.id, guest.user.id],
  );
  return { propertyId: Number(rows[0]!.pid), guestId: Number(rows[0]!.gid) };
}

const values = (propertyId: number, guestId: number) => ({
  publicId: randomUUID(),
  propertyId,
  guestId,
  checkIn: '2031-03-01',
  checkOut: '2031-03-03',
  guests: 1,
  currency: 'EUR',
  nights: 2,
  nightlyPrice: 100,
  subtotal: 200,
  cleaningFee: 0,
  serviceFee: 0,
  total: 200,
});

describe('the booking and its event in one statement, outside withTransaction (notify inside the transaction)', () => {
  it('writes both rows; the wake-up arrives at COMMIT and not after a rollback', async () => {
    const { propertyId, guestId } = await ids();
    const listener = new pg.Client({ connectionString: t.db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => n.channel === OUTBOX_CHANNEL && heard.push(n.payload ?? ''));
    await listener.query(`listen ${OUTBOX_CHANNEL}`);
    try {
      const rolledBack = values(propertyId, guestId);
      await expect(
        t.db.db.transaction(async (tx) => {
          await insertWithTopicEvent(tx, bookingInsert(rolledBack), 'booking.created', bookingPayload(), { key: rolledBack.publicId });
          throw new Error('roll back');
        }),
      ).rejects.toThrow('roll back');

      const kept = values(propertyId, guestId);
      const event = bookingPayload({ bookingId: kept.publicId });
      const row = await t.db.db.transaction((tx) =>
        insertWithTopicEvent(tx, bookingInsert(kept), 'booking.created', event, { key: kept.publicId }).then((r) => r && toBookingRow(r)),
      );
      expect(row?.publicId).toBe(kept.publicId);
      expect(row?.id).toBeGreaterThan(0);
      expect(row?.stay).toBe('[2031-03-01,2031-03-03)');
      expect(row?.status).toBe('confirmed');
      // Everything committed before it has reached the listener once a marker sent afterwards has:
      // notifications are delivered in commit order, whatever the machine's load.
      await t.db.pool.query('select pg_notify($1, $2)', [OUTBOX_CHANNEL, 'marker']);
      await waitFor(async () => heard.includes('marker'), 30_000, 'the marker notification');

      const { rows } = await t.db.pool.query(`select key, payload, public_id from outbox where key = any($1::text[])`, [
        [kept.publicId, rolledBack.publicId],
      ]);
      expect(rows).toEqual([{ key: kept.publicId, payload: event, public_id: expect.any(String) }]);
      // The wake-up names the kept message (its public id); the rolled-back one sent none.
      expect(heard).toEqual([rows[0].public_id, 'marker']);
      const b = await t.db.pool.query(`select count(*)::int as n from bookings where public_id = any($1::uuid[])`, [
        [kept.publicId, rolledBack.publicId],
      ]);
      expect(b.rows[0].n).toBe(1);
    } finally {
      await listener.end();
    }
  });
});

describe('POST /bookings', () => {
  it('on an idle API, writes booking, event and wake-up in one statement, and sends no notify after the COMMIT', async () => {
    // The app on a pool whose statements are logged; t.db's pool stays the test's own.
    const traced = createDatabase(t.db.url, { max: 4, applicationName: 'stayhub-test-traced' });
    const log = recordStatements(traced.pool);
    const app = (await buildTestApp({ ...t.db, ...traced } as TestDatabase, { LOG_LEVEL: 'warn' })).app;
    const normalised = (st: LoggedStatement) => st.text.replace(/\s+/g, ' ').trim().toLowerCase();
    const notifies = () => log.statements.filter((st) => /pg_notify/i.test(st.text));
    try {
      const host = await signUp(app, 'host');
      const guest = await signUp(app, 'guest');
      const p = await listProperty(app, host);
      log.clear();
      const res = await app.inject({
        method: 'POST',
        url: '/bookings',
        headers: guest.auth,
        payload: { propertyId: p.id, checkIn: daysFromNow(20), checkOut: daysFromNow(22), guests: 1 },
      });
      expect(res.statusCode, res.body).toBe(201);
      const inserts = log.statements.filter((st) => /insert into bookings/i.test(st.text));
      expect(inserts).toHaveLength(1);
      const insert = inserts[0]!;
      expect(insert.text, 'the booking statement carries the wake-up').toMatch(/pg_notify/i);
      const commit = log.statements.find(
        (st) => st.connection === insert.connection && st.startSeq > insert.startSeq && normalised(st) === 'commit',
      );
      expect(commit, 'the booking transaction committed').toBeDefined();
      // A later request on the same app: had the first left a notify to send, it would be sent by now.
      await app.inject({ method: 'GET', url: '/health' });
      expect(notifies().filter((st) => st.startSeq > commit!.startSeq)).toEqual([]);
    } finally {
      await app.close();
      await traced.close();
    }
  });
});
