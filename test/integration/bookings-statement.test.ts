import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { listProperty, signUp, useTestApp } from '../helpers/app.ts';
import { insertBookingWithEvent } from '../../src/bookings/bookings.repository.ts';
import { OUTBOX_CHANNEL } from '../../src/outbox/topics.ts';

/*
 * The booking and its outbox row are written by one prepared statement. Its variant for a
 * transaction that has no after-commit work (not started by withTransaction) sends the worker's
 * wake-up inside the transaction: delivered at COMMIT, never after a rollback.
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

describe('insertBookingWithEvent outside withTransaction (notify inside the transaction)', () => {
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
          await insertBookingWithEvent(tx, rolledBack, { topic: 'booking.created', snapshot: '{}', key: rolledBack.publicId, notifyInside: true });
          throw new Error('roll back');
        }),
      ).rejects.toThrow('roll back');

      const kept = values(propertyId, guestId);
      const row = await t.db.db.transaction((tx) =>
        insertBookingWithEvent(tx, kept, { topic: 'booking.created', snapshot: '{"a":1}', key: kept.publicId, notifyInside: true }),
      );
      expect(row?.publicId).toBe(kept.publicId);
      expect(row?.id).toBeGreaterThan(0);
      expect(row?.stay).toBe('[2031-03-01,2031-03-03)');
      expect(row?.status).toBe('confirmed');
      await new Promise((r) => setTimeout(r, 200));
      expect(heard).toEqual(['booking.created']);

      const { rows } = await t.db.pool.query(`select key, payload from outbox where key = any($1::text[])`, [[kept.publicId, rolledBack.publicId]]);
      expect(rows).toEqual([{ key: kept.publicId, payload: { a: 1 } }]);
      const b = await t.db.pool.query(`select count(*)::int as n from bookings where public_id = any($1::uuid[])`, [[kept.publicId, rolledBack.publicId]]);
      expect(b.rows[0].n).toBe(1);
    } finally {
      await listener.end();
    }
  });
});
