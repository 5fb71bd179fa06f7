import type { Rule } from '../case-file.ts';

/* The rules on what the clients were told: their bookings found as told, no 500, no double booking, one answer a key. */

export const clientsFindBookings: Rule = {
  name: 'every client that got a 201 finds its booking (GET /bookings/:id and the database), as it was told',
  violations: (c) => {
    const v: string[] = [];
    const lookups = new Map(c.input.lookups.map((l) => [l.id, l]));
    for (const cb of c.input.clientBookings) {
      const l = lookups.get(cb.id);
      if (!c.bookingById.has(cb.id)) v.push(`booking ${cb.id}: answered 201 but not in the database`);
      if (!l) v.push(`booking ${cb.id}: never looked up`);
      else if (l.httpStatus !== 200) v.push(`booking ${cb.id}: GET answered ${l.httpStatus ?? l.error}`);
      else if (!cb.cancelUncertain && l.body?.status !== cb.status)
        v.push(`booking ${cb.id}: client was told ${cb.status}, API says ${l.body?.status}`);
      else if (l.body?.checkIn !== cb.checkIn || l.body?.checkOut !== cb.checkOut) v.push(`booking ${cb.id}: dates differ`);
      const b = c.bookingById.get(cb.id);
      if (b && !cb.cancelUncertain && b.status !== cb.status)
        v.push(`booking ${cb.id}: client was told ${cb.status}, the database says ${b.status}`);
    }
    return v;
  },
};

export const noOverlaps: Rule = {
  name: 'no two confirmed bookings overlap (SQL self-join)',
  violations: (c) => c.input.overlaps.map((r) => `${r.a} overlaps ${r.b} (property ${r.propertyId})`),
};

export const no500: Rule = {
  name: 'no request got a 500',
  violations: (c) => c.input.serverErrors.map((e) => `${new Date(e.at).toISOString()} ${e.route} ${e.status} ${e.body.slice(0, 200)}`),
};

export const idempotency: Rule = {
  name: 'the same Idempotency-Key sent twice at once gets the same answer (one booking, replayed)',
  violations: (c) => c.input.idempotencyMismatches,
};
