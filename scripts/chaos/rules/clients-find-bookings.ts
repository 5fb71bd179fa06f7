import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';

/** Rule: every client that got a 201 finds its booking (the API and the database), in the state it was told. */
export function clientsFindBookings(c: CaseFile): CheckResult {
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
  return checkResult('every client that got a 201 finds its booking (GET /bookings/:id and the database), as it was told', v);
}
