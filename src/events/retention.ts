import type { ConsumerInfo, StreamInfo } from '@nats-io/jetstream';
import type { Db } from '../db/client.ts';
import { lastRelayedBefore } from './reconcile-outbox.ts';

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
  /**
   * True while the stream holds every event ever stored in it: nothing aged out, purged or
   * deleted, and (withRelayHistory) no event relayed before it existed, into an earlier stream.
   */
  complete: boolean;
  /**
   * Set by withRelayHistory when the stream was created after the outbox relayed an event: the
   * stream was deleted and created again (by hand, or by the relay or a consumer finding it gone),
   * and what the earlier one held is not in it. Its own sequence starts at 1 again, so nothing in
   * the stream itself tells.
   */
  recreated?: { at: Date; lastRelayed: { messageId: string; processedAt: Date } };
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

/**
 * How far the clocks of nats-server (a stream's `created`) and PostgreSQL (processed_at) may
 * disagree before a stream looks created after an event relayed into it. The relay waits
 * DELETED_STREAM_SETTLE_MS (2 s) between finding its stream gone and creating it, so the events
 * relayed into the old one are always older than that by more than this margin.
 */
export const CREATED_CLOCK_MARGIN_MS = 1000;

/**
 * The holdings, with what the outbox says about the stream's past: an event relayed (DONE) before
 * the stream was created means this stream is not the one that event went into.
 */
export async function withRelayHistory(db: Db, info: StreamInfo, h: StreamHoldings): Promise<StreamHoldings> {
  const created = new Date(info.created);
  if (Number.isNaN(created.getTime())) return h;
  const last = await lastRelayedBefore(db, new Date(created.getTime() - CREATED_CLOCK_MARGIN_MS));
  if (!last) return h;
  return { ...h, complete: false, recreated: { at: created, lastRelayed: last } };
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
  if (h.recreated) {
    parts.push(
      `it was created ${h.recreated.at.toISOString()}, after the outbox had relayed events into an earlier stream (of this name, or another) ` +
        `(the last: ${h.recreated.lastRelayed.messageId}, relayed by ${h.recreated.lastRelayed.processedAt.toISOString()})`,
    );
  }
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
