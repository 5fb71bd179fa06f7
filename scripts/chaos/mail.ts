import { lc, type BookingRow, type ClientRecord } from './evidence.ts';
import type { SinkRecord } from './smtp-sink.ts';

/*
 * The mail the chaos run owes, and the mail the SMTP server took. An expected email is a
 * (Message-ID, recipient) pair; it counts as delivered only if the server accepted that
 * Message-ID for that recipient. Mail to anyone else is a violation (rules/mail.ts).
 */

/** The emails each booking event must produce: handler name and which party gets it. */
export const BOOKING_EMAILS = {
  'booking.created': [
    { handler: 'email.guest-confirmation', to: 'guest' },
    { handler: 'email.host-new-booking', to: 'host' },
  ],
  'booking.cancelled': [
    { handler: 'email.guest-cancellation', to: 'guest' },
    { handler: 'email.host-cancellation', to: 'host' },
  ],
} as const;

export type BookingTopic = keyof typeof BOOKING_EMAILS;

/**
 * The Message-ID the mail contract promises (docs/chaos.md, src/mail/mailer.ts): `<` + the
 * event's idempotency key (`booking-created:<booking id>`) and the handler name, every character
 * outside [A-Za-z0-9._-] turned into '.', `@` the sender's domain `>`. Written out here from the
 * contract rather than by calling the system's helper, so a change of the system's ids shows up
 * as lost mail instead of being followed silently (a unit test pins the two together).
 */
export function expectedMessageId(topic: BookingTopic, bookingId: string, handler: string, domain: string): string {
  const key = `${topic === 'booking.created' ? 'booking-created' : 'booking-cancelled'}:${bookingId}`;
  return `<${`${key}.${handler}`.replace(/[^A-Za-z0-9._-]+/g, '.')}@${domain}>`;
}

/**
 * The emails owed: from the database's bookings and from the clients' 201s, each with the
 * recipient the database (or the client) knows, never the one the event payload carries.
 */
export function expectedMail(bookings: BookingRow[], clientBookings: ClientRecord[], bounce: Set<string>, domain: string) {
  // By `${messageId} ${recipient}`, and by Message-ID; an email to a 550 recipient `bounces`: owed
  // an attempt, never a delivery.
  type ExpectedEmail = { messageId: string; recipient: string; what: string; bounces: boolean };
  const byKey = new Map<string, ExpectedEmail>();
  const byMessageId = new Map<string, ExpectedEmail[]>();
  const expect_ = (topic: BookingTopic, bookingId: string, guest: string, host: string) => {
    for (const e of BOOKING_EMAILS[topic]) {
      const messageId = expectedMessageId(topic, bookingId, e.handler, domain);
      const recipient = lc(e.to === 'guest' ? guest : host);
      const k = `${messageId} ${recipient}`;
      if (byKey.has(k)) continue;
      const email = { messageId, recipient, what: `${topic} ${bookingId}: ${e.handler} to ${recipient}`, bounces: bounce.has(recipient) };
      byKey.set(k, email);
      byMessageId.set(messageId, [...(byMessageId.get(messageId) ?? []), email]);
    }
  };
  for (const b of bookings) {
    expect_('booking.created', b.publicId, b.guestEmail, b.hostEmail);
    if (b.status === 'cancelled') expect_('booking.cancelled', b.publicId, b.guestEmail, b.hostEmail);
  }
  for (const c of clientBookings) {
    expect_('booking.created', c.id, c.guestEmail, c.hostEmail);
    if (c.status === 'cancelled' && !c.cancelUncertain) expect_('booking.cancelled', c.id, c.guestEmail, c.hostEmail);
  }
  return { byKey, byMessageId };
}

/** The SMTP server's record: accepted (Message-ID, envelope recipient) pairs, and its refusals. */
export function acceptedMail(records: SinkRecord[]) {
  // `${messageId} ${recipient}` → copies accepted, and when the first was (ms epoch); deliveries counts them all.
  const copies = new Map<string, number>();
  const firstAt = new Map<string, number>();
  let deliveries = 0;
  let refused451 = 0;
  let refused550 = 0;
  for (const r of records) {
    if (r.kind === 'accepted') {
      for (const to of r.to) {
        deliveries++;
        const k = `${r.messageId ?? '(no Message-ID)'} ${lc(to)}`;
        copies.set(k, (copies.get(k) ?? 0) + 1);
        firstAt.set(k, Math.min(firstAt.get(k) ?? Infinity, r.at));
      }
    } else if (r.code === 451) refused451++;
    else refused550++;
  }
  return { copies, firstAt, deliveries, refused451, refused550 };
}

/** How many emails are owed a delivery: the expected ones less those to 550 recipients. */
export function deliveriesOwed(m: ReturnType<typeof expectedMail>): number {
  return [...m.byKey.values()].filter((e) => !e.bounces).length;
}
