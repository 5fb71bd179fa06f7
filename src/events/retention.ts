import type { ConsumerInfo, StreamInfo } from '@nats-io/jetstream';

/*
 * What the events stream no longer holds. It keeps each event EVENTS_MAX_AGE_SECONDS, then drops it
 * whether or not every group read it (a log, not a work queue); someone may also delete single
 * events or purge it. Whatever is gone can no longer be replayed, and a group that had not read it
 * never will: the two questions below.
 */

export interface StreamHoldings {
  /** The first event it still holds (0 for a stream that never held one). */
  firstSeq: number;
  /** That event's time; null when the stream holds none. */
  firstAt: Date | null;
  lastSeq: number;
  /** Events deleted one by one from inside the stream. */
  deleted: number;
  /** True while the stream holds every event ever stored in it: nothing aged out, purged or deleted. */
  complete: boolean;
}

export function streamHoldings(info: StreamInfo): StreamHoldings {
  const s = info.state;
  const deleted = s.num_deleted ?? 0;
  return {
    firstSeq: s.first_seq,
    firstAt: s.messages > 0 ? new Date(s.first_ts) : null,
    lastSeq: s.last_seq,
    deleted,
    // An empty new stream reports first_seq 0; one whose every event is gone, last_seq + 1.
    complete: s.first_seq <= 1 && deleted === 0,
  };
}

/** "it starts at sequence 1234 (2027-01-05T10:00:00.000Z): 1233 earlier events are gone; 2 were deleted from inside it". */
export function describeHoldings(h: StreamHoldings): string {
  const parts: string[] = [];
  if (h.firstSeq > 1) {
    const gone = h.firstSeq - 1;
    const start =
      h.firstAt === null
        ? `it holds no event any more (the last was sequence ${h.lastSeq})`
        : `it starts at sequence ${h.firstSeq} (${h.firstAt.toISOString()})`;
    parts.push(`${start}: ${gone} earlier event(s) aged out (EVENTS_MAX_AGE_SECONDS) or were purged`);
  }
  if (h.deleted > 0) parts.push(`${h.deleted} event(s) were deleted from inside it`);
  return parts.join('; ');
}

/**
 * True when events a group had not read are gone from the stream: its next event (after the last
 * one delivered to it, or after its ack floor while deliveries wait for their ack) is older than
 * the stream's first. The server then hands the group the first event it still has, as if nothing
 * had happened; this is the only trace.
 *
 * The server cannot say whether the events that went were ones the group reads (a group that reads
 * some subjects only has been given none of the others): a group that has read nothing for the
 * whole retention is flagged even if nothing it reads was published meanwhile.
 */
export function groupMissedEvents(c: ConsumerInfo, h: StreamHoldings): boolean {
  if (h.firstSeq <= 1) return false;
  const neverDelivered = c.delivered.stream_seq + 1 < h.firstSeq;
  // A new group's ack floor is 0 until its first ack: only an ack floor it has moved says anything.
  const unackedGone = c.num_ack_pending > 0 && c.ack_floor.stream_seq > 0 && c.ack_floor.stream_seq + 1 < h.firstSeq;
  return neverDelivered || unackedGone;
}
