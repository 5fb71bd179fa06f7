import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ensureWalSlot, materialize, OUTBOX_CHANNEL, setOutboxWrites } from '../../../src/outbox/index.ts';
import { book, buildTestApp, listProperty, signUp, type TestApp } from '../../helpers/app.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { logicalTestDatabase } from '../../helpers/logical-database.ts';
import { recordingWorker } from '../../helpers/recording-worker.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The booking path with OUTBOX_WRITES=wal (ADR 0056): the booking's INSERT writes its message to
 * the WAL in the same statement (insertWithEvent), so the transaction writes no outbox row, and the
 * worker's materialize makes the same rows the table path writes. A booking the exclusion
 * constraint refuses writes no message either.
 */

// A server of its own at wal_level logical (test/helpers/logical-database.ts), the app on it.
let db: TestDatabase | undefined;
let built: TestApp | undefined;
const t = {
  get db() {
    return db!;
  },
  get app() {
    return built!.app;
  },
};
const slot = `stayhub_test_${randomUUID().replaceAll('-', '').slice(0, 12)}`;

beforeAll(async () => {
  db = await logicalTestDatabase('walbook');
  built = await buildTestApp(db);
  await ensureWalSlot(t.db.url, slot);
}, 60_000);
beforeEach(() => setOutboxWrites('wal'));
afterEach(() => setOutboxWrites('table'));
afterAll(async () => {
  setOutboxWrites('table');
  await built?.app.close();
  await db?.drop();
});

const messagesOf = async (bookingId: string) =>
  (
    await t.db.pool.query<{ topic: string; group_id: string; owner_id: string; has_turn: boolean; booking: string }>(
      `select topic, group_id, owner_id, turn is not null as has_turn, payload->>'bookingId' as booking
         from outbox where key = $1 order by id`,
      [bookingId],
    )
  ).rows;

describe('bookings with their messages in the WAL', () => {
  it('write no outbox row; the worker makes the rows the table path writes; a refused booking writes nothing', async () => {
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host);
    // The worker's channel: the API wakes nobody for a message that is not yet a row; making the
    // rows does (outbox_make_rows).
    const listener = new pg.Client({ connectionString: t.db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query(`listen ${OUTBOX_CHANNEL}`);

    const booked = await book(t.app, guest, { propertyId: property.id, inDays: 10, nights: 2 });
    expect(booked.statusCode, booked.body).toBe(201);
    const id = booked.json().id as string;
    // The same dates again: refused by the exclusion constraint, so no message.
    const refused = await book(t.app, guest, { propertyId: property.id, inDays: 10, nights: 2 });
    expect(refused.statusCode, refused.body).toBe(409);
    const cancelled = await t.app.inject({ method: 'POST', url: `/bookings/${id}/cancel`, headers: host.auth });
    expect(cancelled.statusCode).toBe(200);
    expect(await messagesOf(id)).toEqual([]);
    // Long enough for a wake-up sent after the commit to arrive (a notification is sent at its commit).
    await new Promise((r) => setTimeout(r, 300));
    expect(heard).toEqual([]);

    let moveTo: string | null = null;
    for (;;) {
      const r = await materialize(t.db.pool, slot, moveTo);
      moveTo = r.moveTo;
      if (r.made === 0) break;
    }
    expect(await messagesOf(id)).toEqual([
      { topic: 'booking.created', group_id: host.user.id, owner_id: guest.user.id, has_turn: true, booking: id },
      { topic: 'booking.cancelled', group_id: host.user.id, owner_id: host.user.id, has_turn: true, booking: id },
    ]);
    await waitFor(async () => heard.includes('booking.cancelled') || undefined, 5_000, 'the wake-ups of the rows made');
    expect(heard).toContain('booking.created');
    await listener.end();
  });

  it('switched on while bookings arrive: rows written before and messages after are each handled once', async () => {
    const { worker, handled } = recordingWorker(t.db, 'booking.created', 'bookingId', { OUTBOX_WRITES: 'wal', OUTBOX_SLOT: slot });
    await worker.start();
    try {
      const host = await signUp(t.app, 'host');
      const guest = await signUp(t.app, 'guest');
      const property = await listProperty(t.app, host);
      const booked: string[] = [];
      for (let i = 0; i < 12; i++) {
        // The first half written as rows (the API before the switch), the rest to the WAL.
        setOutboxWrites(i < 6 ? 'table' : 'wal');
        const r = await book(t.app, guest, { propertyId: property.id, inDays: 30 + 3 * i, nights: 2 });
        expect(r.statusCode, r.body).toBe(201);
        booked.push(r.json().id as string);
      }
      // (The first test's bookings are handled too: this worker is the first to run.)
      const ofThese = () => handled.filter((id) => booked.includes(id));
      await waitFor(async () => ofThese().length >= booked.length, 20_000, 'every booking handled');
      // A moment more for a second handling, which must not come.
      await new Promise((r) => setTimeout(r, 300));
      expect(ofThese().sort()).toEqual([...booked].sort());
      const { rows } = await t.db.pool.query<{ n: number }>(
        `select count(*)::int as n from outbox where topic = 'booking.created' and key = any($1) and status = 'DONE'`,
        [booked],
      );
      expect(rows[0]!.n).toBe(booked.length);
    } finally {
      await worker.stop();
    }
  });
});
