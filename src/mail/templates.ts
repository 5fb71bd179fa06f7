import type { PayloadOf } from '../messages/topics.ts';
import { withoutInvisibleCharacters } from '../validation.ts';

/**
 * The four booking emails. Each returns a subject and a text and an HTML body built from the
 * event's snapshot: property title, dates, nights, guests, total in the booking's currency, and
 * the booking id to quote. Every value that came from a user is HTML-escaped in the HTML body,
 * and loses its invisible and text-direction characters everywhere (the API refuses them in names
 * and titles; rows saved before it did, or written another way, may still hold them).
 */

type Booking = PayloadOf<'booking.created'>;
type Cancellation = PayloadOf<'booking.cancelled'>;

export interface RenderedEmail {
  subject: string;
  text: string;
  html: string;
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** Minor units → "€1,234.50": the currency's own number of decimals (0 for JPY, 2 for EUR…). */
export function formatMoney(minor: number, currency: string): string {
  const fmt = new Intl.NumberFormat('en-GB', { style: 'currency', currency });
  const digits = fmt.resolvedOptions().maximumFractionDigits ?? 2;
  return fmt.format(minor / 10 ** digits);
}

/** '2026-12-04' → 'Fri 4 Dec 2026'. Stay dates are calendar dates: formatted in UTC, never shifted. */
export function formatDate(isoDate: string): string {
  return new Intl.DateTimeFormat('en-GB', {
    weekday: 'short',
    day: 'numeric',
    month: 'short',
    year: 'numeric',
    timeZone: 'UTC',
  })
    .format(new Date(`${isoDate}T00:00:00Z`))
    .replace(',', '');
}

/** The snapshot with its user-typed text as the API now accepts it (src/validation.ts). */
function shown<T extends Booking>(b: T): T {
  return {
    ...b,
    propertyTitle: withoutInvisibleCharacters(b.propertyTitle),
    guestName: withoutInvisibleCharacters(b.guestName),
    hostName: withoutInvisibleCharacters(b.hostName),
  };
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function facts(b: Booking): [string, string][] {
  return [
    ['Property', b.propertyTitle],
    ['Check-in', formatDate(b.checkIn)],
    ['Check-out', formatDate(b.checkOut)],
    ['Nights', String(b.nights)],
    ['Guests', String(b.guests)],
    ['Total', formatMoney(b.total, b.currency)],
    ['Booking', b.bookingId],
  ];
}

function render(greeting: string, lead: string, b: Booking, closing: string): { text: string; html: string } {
  const rows = facts(b);
  const width = Math.max(...rows.map(([k]) => k.length)) + 2;
  const text = [greeting, '', lead, '', ...rows.map(([k, v]) => `${`${k}:`.padEnd(width)}${v}`), '', closing, '', '— StayHub', ''].join(
    '\n',
  );
  const html = `<!doctype html>
<html><body style="font-family: sans-serif; color: #222">
<p>${escapeHtml(greeting)}</p>
<p>${escapeHtml(lead)}</p>
<table cellpadding="4" style="border-collapse: collapse">
${rows.map(([k, v]) => `<tr><th align="left">${escapeHtml(k)}</th><td>${escapeHtml(v)}</td></tr>`).join('\n')}
</table>
<p>${escapeHtml(closing)}</p>
<p>— StayHub</p>
</body></html>
`;
  return { text, html };
}

const stay = (b: Booking) => `${formatDate(b.checkIn)} – ${formatDate(b.checkOut)}`;

export function guestConfirmation(b: Booking): RenderedEmail {
  b = shown(b);
  return {
    subject: `Booking confirmed: ${b.propertyTitle}, ${stay(b)}`,
    ...render(
      `Hello ${b.guestName},`,
      `Your stay at ${b.propertyTitle} is confirmed: ${plural(b.nights, 'night')} for ${plural(b.guests, 'guest')}.`,
      b,
      `${b.hostName} is expecting you. Quote booking ${b.bookingId} in any message about this stay.`,
    ),
  };
}

export function hostNewBooking(b: Booking): RenderedEmail {
  b = shown(b);
  return {
    subject: `New booking: ${b.propertyTitle}, ${stay(b)}`,
    ...render(
      `Hello ${b.hostName},`,
      `${b.guestName} has booked ${b.propertyTitle} for ${plural(b.nights, 'night')} (${plural(b.guests, 'guest')}).`,
      b,
      'The dates are now blocked on your calendar.',
    ),
  };
}

const byWhom = (c: Cancellation, audience: 'guest' | 'host') =>
  c.cancelledBy === audience ? 'at your request' : c.cancelledBy === 'host' ? 'by the host' : 'by the guest';

export function guestCancellation(c: Cancellation): RenderedEmail {
  c = shown(c);
  return {
    subject: `Booking cancelled: ${c.propertyTitle}, ${stay(c)}`,
    ...render(
      `Hello ${c.guestName},`,
      `Your booking at ${c.propertyTitle} has been cancelled ${byWhom(c, 'guest')}.`,
      c,
      'Nothing more is owed for this stay.',
    ),
  };
}

export function hostCancellation(c: Cancellation): RenderedEmail {
  c = shown(c);
  return {
    subject: `Booking cancelled: ${c.propertyTitle}, ${stay(c)}`,
    ...render(
      `Hello ${c.hostName},`,
      `The booking of ${c.propertyTitle} by ${c.guestName} has been cancelled ${byWhom(c, 'host')}.`,
      c,
      'The dates are free again on your calendar.',
    ),
  };
}

export interface WebhookDisabled {
  endpointId: string;
  url: string;
  hostName: string;
  reason: string;
}

export function hostWebhookDisabled(w: WebhookDisabled): RenderedEmail {
  const name = withoutInvisibleCharacters(w.hostName);
  const lines = [
    `Hello ${name},`,
    '',
    `We have stopped sending booking events to your webhook endpoint ${w.url}: ${w.reason}.`,
    '',
    'Nothing is lost. Events keep being recorded for you; once the endpoint answers again, enable it',
    `(PATCH /webhooks/endpoints/${w.endpointId} with {"enabled": true}) and ask for what it missed`,
    `(POST /webhooks/endpoints/${w.endpointId}/recover with {"since": "<when it stopped>"}).`,
    '',
    '— StayHub',
    '',
  ];
  const html = `<!doctype html>
<html><body style="font-family: sans-serif; color: #222">
${lines
  .filter((l) => l !== '')
  .map((l) => `<p>${escapeHtml(l)}</p>`)
  .join('\n')}
</body></html>
`;
  return { subject: `Webhook endpoint disabled: ${w.url}`, text: lines.join('\n'), html };
}
