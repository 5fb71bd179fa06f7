import { describe, expect, it } from 'vitest';
import { book, listProperty, signUp, useTestApp } from '../../helpers/app.ts';

/*
 * Whom the bookings' messages belong to in the outbox's turns (ADR 0033, 0039): their group is the
 * host, their owner the account whose action wrote them: the guest who books, whoever cancels.
 */

const t = useTestApp();

const messagesOf = async (bookingId: string) =>
  (
    await t.db.pool.query<{ topic: string; group_id: string; owner_id: string; has_turn: boolean }>(
      `select topic, group_id, owner_id, turn is not null as has_turn from outbox where key = $1 order by id`,
      [bookingId],
    )
  ).rows;

describe("a booking's messages", () => {
  it('belong to the host as group, and to the guest who booked or the account that cancelled as owner', async () => {
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    const property = await listProperty(t.app, host);

    const byGuest = await book(t.app, guest, { propertyId: property.id, inDays: 10, nights: 2 });
    expect(byGuest.statusCode, byGuest.body).toBe(201);
    const cancelledByHost = await t.app.inject({ method: 'POST', url: `/bookings/${byGuest.json().id}/cancel`, headers: host.auth });
    expect(cancelledByHost.statusCode).toBe(200);
    expect(await messagesOf(byGuest.json().id)).toEqual([
      { topic: 'booking.created', group_id: host.user.id, owner_id: guest.user.id, has_turn: true },
      { topic: 'booking.cancelled', group_id: host.user.id, owner_id: host.user.id, has_turn: true },
    ]);

    const second = await book(t.app, guest, { propertyId: property.id, inDays: 20, nights: 2 });
    expect(second.statusCode, second.body).toBe(201);
    const cancelledByGuest = await t.app.inject({ method: 'POST', url: `/bookings/${second.json().id}/cancel`, headers: guest.auth });
    expect(cancelledByGuest.statusCode).toBe(200);
    expect((await messagesOf(second.json().id)).map((m) => m.owner_id)).toEqual([guest.user.id, guest.user.id]);
  });
});
