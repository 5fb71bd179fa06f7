import { EVENT_FAULT_KINDS, FAULT_KINDS, type FaultKind } from './fault-kinds.ts';

/**
 * What a run must contain before its checks mean anything, scaled to the load's duration.
 * A run on a quiet 2-core machine makes ~25 bookings a second (16,600 in the committed 10-minute
 * run); the floor is one every two seconds (at least 10), so a machine loaded many times over
 * still passes and an empty or stalled run does not. Faults: every kind at least once, and three quarters of each kind's
 * planned count, with evidence; the events kinds only when the events part ran.
 */
export function minimums(durationSeconds: number, planned: Partial<Record<FaultKind, number>>, eventsRan: boolean) {
  const bookings = Math.max(10, Math.ceil(durationSeconds / 2));
  return {
    bookings,
    cancellations: Math.max(1, Math.ceil(durationSeconds / 15)),
    // Two emails a booking, less those to the two 550 guests (2 of 16): 1.5 a booking is a safe floor.
    emailsExpected: Math.ceil(bookings * 1.5),
    // Per fault kind, faults with evidence (0 for the events kinds when the events part did not run).
    faults: Object.fromEntries(
      FAULT_KINDS.map((k) => [k, !eventsRan && EVENT_FAULT_KINDS.includes(k) ? 0 : Math.max(1, Math.ceil((planned[k] ?? 0) * 0.75))]),
    ) as Record<FaultKind, number>,
  };
}
