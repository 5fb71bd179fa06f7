import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';
import type { OutboxRow } from '../evidence.ts';

const isBookingEvent = (m: OutboxRow) => m.topic === 'booking.created' || m.topic === 'booking.cancelled';

/**
 * Rule: every booking has exactly one booking.created event; every cancelled one exactly one
 * booking.cancelled; no event without its booking (the outbox row and the booking are one commit).
 */
export function eventsInOutbox(c: CaseFile): CheckResult {
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
  return checkResult('every booking has exactly its events in the outbox (same transaction)', v);
}
