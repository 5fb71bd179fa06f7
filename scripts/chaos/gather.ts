import type pg from 'pg';
import type { ApiClient } from './client.ts';
import type { ClientBooking, User } from './load.ts';
import type { BookingRow, ClientRecord, JudgeInput, Lookup, OutboxRow } from './evidence.ts';
import { messagesAsWritten, slowestMessages } from '../../src/outbox/index.ts';

/*
 * The chaos run's evidence, gathered after the workers have drained: what the database holds and
 * what the API answers each client about its booking. verdict.ts judges it; nothing here decides.
 */

/** The client's notes as plain data: addresses from what the client itself signed up with. */
export function clientRecords(bookings: Iterable<ClientBooking>): ClientRecord[] {
  return [...bookings].map(({ guest: _guest, property: _property, ...record }) => record);
}

export async function gather(db: pg.Pool, api: ApiClient, clientBookings: ClientBooking[]) {
  // Addresses from `users`, joined through the booking's guest and the property's host: the
  // database's truth, not the copy the event payload carries to the worker.
  const { rows: bookings } = await db.query<BookingRow>(
    `select b.public_id as "publicId", b.status, g.email as "guestEmail", h.email as "hostEmail"
       from bookings b
       join users g on g.id = b.guest_id
       join properties p on p.id = b.property_id
       join users h on h.id = p.host_id`,
  );
  // The judge's input keeps the fields it judges (judge-input.json, the golden verdicts).
  const outbox = (await messagesAsWritten(db)).map(({ laneOpen: _lane, createdMs: _created, ...row }): OutboxRow => row);
  // Our own self-join, not trust in the exclusion constraint that is supposed to guarantee it.
  const { rows: overlaps } = await db.query<JudgeInput['overlaps'][number]>(
    `select a.public_id as a, b.public_id as b, a.property_id::text as "propertyId"
       from bookings a
       join bookings b on b.property_id = a.property_id and b.id > a.id
      where a.status = 'confirmed' and b.status = 'confirmed'
        and a.check_in < b.check_out and b.check_in < a.check_out`,
  );

  const lookups: Lookup[] = [];
  const queue = [...clientBookings];
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let cb = queue.shift(); cb; cb = queue.shift()) {
        try {
          const res = await api.call('GET', `/bookings/${cb.id}`, {
            token: (cb.guest as User).token,
            route: 'GET /bookings/:id',
            deadlineMs: 30_000,
          });
          lookups.push({ id: cb.id, httpStatus: res.status, body: res.status === 200 ? res.body : undefined });
        } catch (err) {
          lookups.push({ id: cb.id, httpStatus: null, error: String(err) });
        }
      }
    }),
  );

  // The messages that took longest from commit to DONE/DEAD: where the max pending age came from.
  const slowest = await slowestMessages(db, 5);
  return {
    bookings,
    outbox,
    overlaps,
    lookups,
    slowest: slowest.map((r) => ({
      topic: r.topic,
      status: r.status,
      attempts: r.attempts,
      seconds: Math.round(r.seconds * 10) / 10,
      createdAt: r.created_at.toISOString(),
      lastError: r.last_error ? r.last_error.slice(0, 300) : null,
    })),
  };
}
