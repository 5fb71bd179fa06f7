import { sql } from 'drizzle-orm';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Db } from '../../db/client.ts';
import { withTransaction } from '../../db/transaction.ts';
import type { Logger } from '../../logger.ts';
import { finishedPayloadValues } from '../../outbox/index.ts';
import { RELAY_HANDLER } from '../relay.ts';
import { countMissed, type MissedBookingEvent } from './ledger.ts';

/*
 * The ledger's audit against the outbox. The group's position in the stream is a sequence number,
 * and the stream is not trusted to keep it meaning the same events: when a replica that was behind
 * becomes the stream's leader (NATS 2.9 after a whole cluster restarted, measured in the chaos
 * run), the stream goes back a few sequences and stores the next events at numbers the group has
 * already acknowledged. The group never asks for those again: their bookings are missing from the
 * ledger, and nothing else notices (the relay's reconcile finds them in the stream).
 *
 * So, on a timer, the consumer asks the outbox, the source of truth: every booking event the relay
 * stored well before the event at the group's ack floor should have been applied. Those the
 * ledger does not count are counted from their bookings' rows, as their events would have been
 * (the ledger already trusts only the bookings table for amounts). earnings_bookings makes it
 * once: an event arriving after its booking was counted here changes nothing.
 */

export interface AuditOptions {
  db: Db;
  jsm: JetStreamManager;
  stream: string;
  group: string;
  /** How far back from the ack floor's event each audit reads the outbox. */
  lookbackMs: number;
  /**
   * Left out before the ack floor's event (2 s): its time is the NATS server's clock, processed_at
   * is PostgreSQL's. An event taken for missed by a larger skew is still counted once (its arrival
   * changes nothing), only reported as missed when it was late.
   */
  marginMs?: number;
}

export interface AuditResult {
  /** Events relayed before this were checked; null: the group has acknowledged nothing yet. */
  checkedBefore: Date | null;
  /** Bookings whose creation, or cancellation, this counted. */
  creations: number;
  cancellations: number;
}

const BOOKING_TOPICS = ['booking.created', 'booking.cancelled'] as const;

/**
 * Relayed booking events processed in [since, until) that the group's ledger does not count. The
 * outbox gives the facts (each relayed event's topic and booking id, finishedPayloadValues); the
 * bookings, their hosts and the ledger are joined here, on this side of the outbox's surface.
 */
async function missedEvents(db: Db, group: string, since: Date, until: Date): Promise<MissedBookingEvent[]> {
  const relayed = await finishedPayloadValues(db, { handler: RELAY_HANDLER, topics: BOOKING_TOPICS, field: 'bookingId', since, until });
  if (relayed.length === 0) return [];
  // One probe of bookings_public_id_unique per booking; the ledger's row, if any, by its key.
  const { rows } = await db.execute<{
    public_id: string;
    id: string;
    host_id: string;
    total: number;
    currency: string;
    counted: boolean;
    cancelled: boolean;
  }>(sql`
    select b.public_id::text as public_id, b.id, p.host_id, b.total, b.currency,
           e.booking_id is not null as counted, coalesce(e.cancelled, false) as cancelled
      from bookings b
      join properties p on p.id = b.property_id
      left join earnings_bookings e on e.consumer_group = ${group} and e.booking_id = b.id
     where b.public_id = any(${sql.param([...new Set(relayed.map((r) => r.value))])}::uuid[])`);
  const bookings = new Map(rows.map((r) => [r.public_id, r]));
  const missed: MissedBookingEvent[] = [];
  for (const r of relayed) {
    const b = bookings.get(r.value.toLowerCase());
    if (!b) continue;
    const topic = r.topic as MissedBookingEvent['topic'];
    if (b.counted && (topic !== 'booking.cancelled' || b.cancelled)) continue;
    missed.push({ topic, bookingId: Number(b.id), hostId: Number(b.host_id), total: b.total, currency: b.currency });
  }
  return missed;
}

/** One audit: counts what the group should have applied and did not. */
export async function auditLedger(o: AuditOptions): Promise<AuditResult> {
  const result: AuditResult = { checkedBefore: null, creations: 0, cancellations: 0 };
  const floor = (await o.jsm.consumers.info(o.stream, o.group)).ack_floor.stream_seq;
  if (floor === 0) return result;
  // The ack floor's event, read after the group's info: every event stored before it was acknowledged.
  const anchor = (await o.jsm.streams.getMessage(o.stream, { seq: floor }).catch(() => null))?.time ?? (await pastTheEnd(o, floor));
  if (!anchor) return result; // aged out or deleted: the next audit, from a later floor
  const until = new Date(anchor.getTime() - (o.marginMs ?? 2_000));
  result.checkedBefore = until;
  const missed = await missedEvents(o.db, o.group, new Date(until.getTime() - o.lookbackMs), until);
  for (const m of missed) {
    const counted = await withTransaction(o.db, (tx) => countMissed(tx, o.group, m));
    if (counted.creation) result.creations++;
    if (counted.cancellation) result.cancellations++;
  }
  return result;
}

/**
 * When the floor's event is not in the stream and the floor is at or past the stream's last
 * sequence, the time of the stream's last event: the group has gone past everything the stream
 * holds, so each event stored before it should have been applied. A stream that went back below
 * the group's position (a replica that was behind became its leader, with the floor's event
 * never on it) stores its next events at numbers the group has acknowledged: without this the
 * audit, the one thing that finds those, would skip every round until the stream passed the floor
 * again. Null otherwise (the event aged out or was deleted below the end: a later floor serves).
 */
async function pastTheEnd(o: AuditOptions, floor: number): Promise<Date | null> {
  const info = await o.jsm.streams.info(o.stream).catch(() => null);
  if (!info || info.state.last_seq === 0 || floor < info.state.last_seq) return null;
  return new Date(info.state.last_ts);
}

export interface LedgerAudit {
  /** One audit now (after the one in progress, if any); what it counted. */
  runOnce(): Promise<AuditResult | undefined>;
  /** No audit after this; waits for the one in progress. */
  stop(): Promise<void>;
}

/**
 * Audits every `intervalMs`, each after the last one ended (a slow audit delays the next, never
 * overlaps it). An audit that fails (NATS or PostgreSQL away) is logged and tried at the next one.
 */
export function startLedgerAudit(o: AuditOptions & { intervalMs: number; log: Logger; onCounted: (n: number) => void }): LedgerAudit {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let last: Promise<AuditResult | undefined> = Promise.resolve(undefined);
  const once = () => {
    last = last.then(async () => {
      try {
        const r = await auditLedger(o);
        const counted = r.creations + r.cancellations;
        if (counted > 0) {
          o.onCounted(counted);
          o.log.warn(
            { ...r, group: o.group },
            "earnings: booking events relayed before the group's position were never applied (the stream skipped or lost them); counted from the bookings table",
          );
        }
        return r;
      } catch (err) {
        o.log.warn({ err, group: o.group }, 'earnings: ledger audit failed; trying again at the next one');
        return undefined;
      }
    });
    return last;
  };
  const schedule = () => {
    if (stopped || o.intervalMs === 0) return;
    timer = setTimeout(() => void once().then(schedule), o.intervalMs);
  };
  schedule();
  return {
    runOnce: once,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await last;
    },
  };
}
