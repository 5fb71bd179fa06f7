import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { waitFor } from '../../helpers/wait.ts';
import { BOOKING_LOCK_NAMESPACE } from '../../../src/bookings/booking.service.ts';
import { BOOKING_LOCK_KEY_SQL } from '../../../src/bookings/bookings.repository.ts';

/*
 * The per-property booking lock takes the property's whole bigint id: cast to int
 * (pg_advisory_xact_lock(ns, id::int)), every booking of a property whose id passed 2^31 would
 * fail ("integer out of range"), and ids that differ only above 32 bits would share a lock.
 */

const t = useTestApp({ LOG_LEVEL: 'warn' });

async function propertyWithIdAbove(min: number) {
  await t.db.pool.query(`select setval('properties_id_seq', $1)`, [min]);
  const host = await signUp(t.app, 'host');
  const p = await listProperty(t.app, host);
  const { rows } = await t.db.pool.query<{ id: string }>('select id from properties where public_id = $1', [p.id]);
  expect(Number(rows[0]!.id)).toBeGreaterThan(min);
  return { publicId: p.id, id: rows[0]!.id };
}

describe('booking a property whose id is past 2^31', () => {
  for (const [label, min] of [
    ['2^31', 2 ** 31],
    ['2^32', 2 ** 32],
    ['2^53 - 2^20', 2 ** 53 - 2 ** 20],
  ] as const) {
    it(`id above ${label}: 201, then a clean 409 for the same dates, never a 5xx under a race`, async () => {
      const property = await propertyWithIdAbove(min);
      const guests = await Promise.all(Array.from({ length: 6 }, () => signUp(t.app, 'guest')));
      const stay = { propertyId: property.publicId, checkIn: daysFromNow(30), checkOut: daysFromNow(33), guests: 2 };
      const first = await t.app.inject({ method: 'POST', url: '/bookings', headers: guests[0]!.auth, payload: stay });
      expect(first.statusCode, first.body).toBe(201);
      const again = await t.app.inject({ method: 'POST', url: '/bookings', headers: guests[1]!.auth, payload: stay });
      expect(again.statusCode, again.body).toBe(409);

      const race = { ...stay, checkIn: daysFromNow(40), checkOut: daysFromNow(42) };
      const codes = (
        await Promise.all(guests.map((g) => t.app.inject({ method: 'POST', url: '/bookings', headers: g.auth, payload: race })))
      ).map((r) => r.statusCode);
      expect(codes.filter((c) => c === 201)).toHaveLength(1);
      expect(codes.filter((c) => c === 409)).toHaveLength(guests.length - 1);
    });
  }

  it('the lock is keyed on the whole id: holding that key makes a booking of the property wait', async () => {
    const property = await propertyWithIdAbove(2 ** 33 + 7);
    const guest = await signUp(t.app, 'guest');
    const holder = new pg.Client({ connectionString: t.db.url });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query(`select pg_advisory_xact_lock(${BOOKING_LOCK_KEY_SQL(BOOKING_LOCK_NAMESPACE, '$1::bigint')})`, [property.id]);
      let done = false;
      const booking = t.app
        .inject({
          method: 'POST',
          url: '/bookings',
          headers: guest.auth,
          payload: { propertyId: property.publicId, checkIn: daysFromNow(50), checkOut: daysFromNow(51), guests: 1 },
        })
        .finally(() => (done = true));
      // The booking's transaction is seen waiting for the very lock the holder has (same key, not
      // granted), before the holder lets go: a booking that took another key, or none, finishes
      // instead, however fast or slow the machine.
      const holderPid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      await waitFor(
        async () => {
          if (done) throw new Error(`the booking finished (${(await booking).statusCode}) without waiting for the lock the holder has`);
          const { rows } = await t.db.pool.query<{ n: number }>(
            `select count(*)::int as n
             from pg_locks held
             join pg_locks waiting on waiting.locktype = 'advisory' and not waiting.granted and waiting.pid <> held.pid
                                  and (waiting.database, waiting.classid, waiting.objid, waiting.objsubid)
                                      = (held.database, held.classid, held.objid, held.objsubid)
            where held.locktype = 'advisory' and held.granted and held.pid = $1`,
            [holderPid],
          );
          return rows[0]!.n === 1;
        },
        30_000,
        'the booking to wait for the advisory lock',
      );
      await holder.query('commit');
      expect((await booking).statusCode).toBe(201);
    } finally {
      await holder.end();
    }
  });
});
