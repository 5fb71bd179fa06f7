import type { CaseFile } from '../case-file.ts';
import type { OutboxRow } from '../evidence.ts';

/* The rules on the outbox: each booking's events written with it, nothing left PENDING, drained in time. */

const isBookingEvent = (m: OutboxRow) => m.topic === 'booking.created' || m.topic === 'booking.cancelled';

/**
 * Every booking has exactly one booking.created event; every cancelled one exactly one
 * booking.cancelled; no event without its booking (the outbox row and the booking are one commit).
 */
export const eventsInOutbox = (c: CaseFile): string[] => {
  const events = new Map<string, OutboxRow[]>();
  for (const m of c.input.outbox) {
    if (!isBookingEvent(m)) continue;
    const k = `${m.topic}:${m.key}`;
    events.set(k, [...(events.get(k) ?? []), m]);
  }
  const v: string[] = [];
  for (const b of c.input.bookings) {
    const created = events.get(`booking.created:${b.publicId}`) ?? [];
    const cancelled = events.get(`booking.cancelled:${b.publicId}`) ?? [];
    if (created.length !== 1) v.push(`booking ${b.publicId} has ${created.length} booking.created events`);
    if (b.status === 'cancelled' && cancelled.length !== 1)
      v.push(`cancelled booking ${b.publicId} has ${cancelled.length} booking.cancelled events`);
    if (b.status === 'confirmed' && cancelled.length !== 0) v.push(`confirmed booking ${b.publicId} has a booking.cancelled event`);
  }
  for (const m of c.input.outbox) {
    if (isBookingEvent(m) && !c.bookingById.has(m.key ?? ''))
      v.push(`${m.topic} ${m.publicId} for a booking that does not exist (${m.key})`);
  }
  return v;
};

/** The messages still PENDING at the end: of topics the worker handles, and of topics it does not. */
export function pendingAtEnd(c: CaseFile): { handled: OutboxRow[]; unhandled: OutboxRow[] } {
  const handled = new Set(c.input.handledTopics);
  const pending = c.input.outbox.filter((m) => m.status === 'PENDING');
  return { handled: pending.filter((m) => handled.has(m.topic)), unhandled: pending.filter((m) => !handled.has(m.topic)) };
}

export const nothingPending = (c: CaseFile): string[] =>
  pendingAtEnd(c).handled.map((m) => `${m.topic} ${m.publicId} still PENDING after ${m.attempts} attempts: ${m.lastError ?? ''}`);

export const drained = (c: CaseFile): string[] => (c.input.drained ? [] : ['not drained']);
