import type { CaseFile } from '../case-file.ts';

/* The rules on what the clients were told: their bookings found as told, no 500, no double booking, one answer a key. */

export const clientsFindBookings = (c: CaseFile): string[] => {
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
};

export const noOverlaps = (c: CaseFile): string[] => c.input.overlaps.map((r) => `${r.a} overlaps ${r.b} (property ${r.propertyId})`);

export const no500 = (c: CaseFile): string[] =>
  c.input.serverErrors.map((e) => `${new Date(e.at).toISOString()} ${e.route} ${e.status} ${e.body.slice(0, 200)}`);

export const idempotency = (c: CaseFile): string[] => c.input.idempotencyMismatches;
