import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';
import { lc } from '../evidence.ts';

/** Each email owed a delivery that the SMTP server never accepted for its recipient. */
export function lostMail(c: CaseFile): string[] {
  const lost: string[] = [];
  for (const [k, e] of c.expected.byKey) if (!e.bounces && !c.accepted.copies.has(k)) lost.push(`${e.what} never delivered`);
  return lost;
}

/** Bookings whose client booked with other addresses than the database holds. */
function clientDisagrees(c: CaseFile): string[] {
  const v: string[] = [];
  for (const cb of c.input.clientBookings) {
    const b = c.bookingById.get(cb.id);
    if (b && (lc(b.guestEmail) !== lc(cb.guestEmail) || lc(b.hostEmail) !== lc(cb.hostEmail))) {
      v.push(
        `booking ${cb.id}: the client booked as ${cb.guestEmail} with host ${cb.hostEmail}, the database says ${b.guestEmail} / ${b.hostEmail}`,
      );
    }
  }
  return v;
}

/**
 * Rule: every booking and every cancellation got its guest and host emails, to the right
 * address: matched on (Message-ID, recipient) in the SMTP server's record.
 */
export function nothingLost(c: CaseFile): CheckResult {
  return checkResult(
    'every booking and every cancellation: guest and host emails delivered to the right address (zero lost; matched on Message-ID and recipient)',
    [...lostMail(c), ...clientDisagrees(c)],
  );
}
