import type { CaseFile } from '../case-file.ts';
import { lc, type OutboxRow } from '../evidence.ts';

/* The rules on the mail: every email owed delivered, none to anyone else, DEAD only for the 550s. */

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

export const nothingLost = (c: CaseFile): string[] => [...lostMail(c), ...clientDisagrees(c)];

/** Mail the SMTP server accepted that nobody was owed, by what is wrong with it. */
export function strayMail(c: CaseFile): { wrongRecipient: string[]; unexpected: string[]; bounceDelivered: string[] } {
  const bounceDelivered: string[] = [];
  for (const [k, e] of c.expected.byKey) {
    if (e.bounces && c.accepted.copies.has(k)) bounceDelivered.push(`${e.what} was accepted although the address answers 550`);
  }
  const unexpected: string[] = [];
  const wrongRecipient: string[] = [];
  for (const k of c.accepted.copies.keys()) {
    if (c.expected.byKey.has(k)) continue;
    const [messageId, recipient] = [k.slice(0, k.lastIndexOf(' ')), k.slice(k.lastIndexOf(' ') + 1)];
    const meant = c.expected.byMessageId.get(messageId);
    if (meant) wrongRecipient.push(`${messageId} delivered to ${recipient}; it was meant for ${meant.map((e) => e.recipient).join(', ')}`);
    else unexpected.push(`unexpected Message-ID ${messageId} (to ${recipient})`);
  }
  return { wrongRecipient, unexpected, bounceDelivered };
}

export const noStrayMail = (c: CaseFile): string[] => {
  const s = strayMail(c);
  return [...s.wrongRecipient, ...s.unexpected, ...s.bounceDelivered];
};

/** What is wrong with one booking event of a 550 guest: it must be DEAD with a 550, its host's email done. */
function bounceViolations(m: OutboxRow): string[] {
  const v: string[] = [];
  if (m.status !== 'DEAD') v.push(`${m.topic} ${m.publicId} to a 550 recipient is ${m.status}, not DEAD`);
  else if (!m.lastError || !/550/.test(m.lastError)) v.push(`${m.topic} ${m.publicId} DEAD without a 550 in last_error: ${m.lastError}`);
  else if (/\S+@\S+\.\w+/.test(m.lastError)) v.push(`${m.topic} ${m.publicId} last_error shows an email address`);
  // The host's email of the same event must still have gone out (handlers are tracked apart).
  const hostHandler = m.topic === 'booking.created' ? 'email.host-new-booking' : 'email.host-cancellation';
  if (!m.handlersDone.includes(hostHandler))
    v.push(`${m.topic} ${m.publicId}: ${hostHandler} not recorded done (last_error: ${m.lastError})`);
  return v;
}

/** DEAD is exactly the events of the 550 recipients, each with its last_error; nothing else. */
export const deadOnlyBounces = (c: CaseFile): string[] => {
  const v: string[] = [];
  for (const m of c.input.outbox) {
    const b = m.key ? c.bookingById.get(m.key) : undefined;
    const involvesBounce = !!b && (m.topic === 'booking.created' || m.topic === 'booking.cancelled') && c.bounce.has(lc(b.guestEmail));
    if (involvesBounce) v.push(...bounceViolations(m));
    else if (m.status === 'DEAD') v.push(`${m.topic} ${m.publicId} is DEAD after ${m.attempts} attempts: ${m.lastError}`);
  }
  return v;
};
