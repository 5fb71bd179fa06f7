import { JetStreamApiCodes, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { createDatabase, type Db } from '../../../src/db/client.ts';
import { openDeadLetters } from '../../../src/events/dead-letters.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { EVENTS_RELAY } from '../../../src/worker/handlers/events-relay.ts';
import { checkResult, EVENT_CHECKS } from '../checks.ts';
import { messagesAsWritten, type MessageAsWritten } from '../../../src/outbox/index.ts';
import type { EventsStage, ForgedEvent } from './observed.ts';

/*
 * The events path's checks, made after everything has drained (names in checks.ts EVENT_CHECKS):
 *
 *   exactly once   every committed booking event (outbox row of booking.*) is in the stream
 *                  exactly once by Nats-Msg-Id, and the stream holds nothing else under booking.*
 *   ledger         the earnings ledger of the group equals what SQL computes from the bookings
 *                  table (confirmed bookings' totals per host and currency)
 *   dead letters   the group has no open consumer dead letter: every event of the run is one the
 *                  ledger can apply, so a dead letter has no innocent explanation here
 *   forged         every forged event was refused (a dead letter), none applied
 */

/**
 * Message id → how many times it is in the stream, for subjects under `filter`: every sequence
 * from the stream's first to its last, asked of the stream's leader (STREAM.MSG.GET), 64 at a
 * time. Not through a consumer: nats-server 2.9 places a consumer on any replica of the stream,
 * and a replica that never caught up after being killed while the stream was deleted and
 * recreated served one a stale copy (23 events where the leader held 6,144): a reading consumer
 * landed there, and the check counted thousands of events missing that the cluster held.
 */
async function countStream(natsUrl: string, stream: string, filter: string): Promise<Map<string, number>> {
  const nc = await connect({ servers: natsUrl.split(',').map((u) => u.replace('nats://', '')) });
  const counts = new Map<string, number>();
  try {
    const jsm = await jetstreamManager(nc);
    const { state } = await jsm.streams.info(stream);
    if (state.messages === 0) return counts;
    const prefix = filter.replace(/>$/, '');
    const read = async (seq: number) => {
      const m = await jsm.streams.getMessage(stream, { seq }).catch((err: unknown) => {
        if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.NoMessageFound) return null;
        throw err;
      });
      if (!m || !m.subject.startsWith(prefix)) return;
      const id = m.header.get('Nats-Msg-Id') || `(no id, seq ${seq})`;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    };
    for (let from = state.first_seq; from <= state.last_seq; from += 64) {
      const to = Math.min(from + 63, state.last_seq);
      await Promise.all(Array.from({ length: to - from + 1 }, (_, i) => read(from + i)));
    }
  } finally {
    await nc.close();
  }
  return counts;
}

const relayed = (r: MessageAsWritten) => r.handlersDone.includes(EVENTS_RELAY) && !r.laneOpen;

/** What the run knows of the stream's history: the forged events and the last deletion. */
interface StreamHistory {
  forged: ForgedEvent[];
  forgedIds: Set<string>;
  /** When the stream was last deleted (ms epoch; -Infinity: never). */
  lastDeletion: number;
}

/** Each committed booking event in the stream exactly once, and nothing else but the forged events. */
function exactlyOnce(rows: MessageAsWritten[], inStream: Map<string, number>, h: StreamHistory): { violations: string[]; gone: number } {
  const violations: string[] = [];
  const committed = new Set(rows.map((r) => r.publicId));
  let gone = 0;
  for (const r of rows) {
    const n = inStream.get(r.publicId) ?? 0;
    if (n === 1) continue;
    // A deleted stream takes what it held with it: an event written before the last deletion and
    // relayed (its relay handler done, and no relay work of it left in the relay's lane) is
    // allowed to be missing from the stream of now.
    if (n === 0 && r.createdMs < h.lastDeletion && relayed(r)) {
      gone++;
      continue;
    }
    violations.push(`${r.publicId} (outbox ${r.status}) is in the stream ${n} time(s)`);
  }
  for (const [id, n] of inStream)
    if (!committed.has(id) && !h.forgedIds.has(id)) violations.push(`${id} is in the stream ${n} time(s) but in no committed outbox row`);
  return { violations, gone };
}

/** The ledger against the bookings table, and where each difference comes from. */
async function ledgerCheck(db: Db, group: string, rows: MessageAsWritten[], inStream: Map<string, number>, h: StreamHistory) {
  const ledger = await ledgerDifferences(db, group);
  const violations = ledger.map((d) => `host ${d.hostId} ${d.currency}: ledger ${d.ledger}, bookings table ${d.truth}`);
  // Where a difference comes from: the confirmed bookings the ledger does not count (money lost)
  // and the cancellations it does not count (money it still credits), and whether their events
  // were relayed into a stream that was deleted before the consumer read them. A cancelled
  // booking counted neither way nets to zero on both sides.
  const { rows: uncounted } = await db.execute<{ public_id: string; status: string; total: number; what: string }>(sql`
    select b.public_id, b.status, b.total, case when e.booking_id is null then 'booking' else 'cancellation' end as what
      from bookings b
      left join earnings_bookings e on e.booking_id = b.id and e.consumer_group = ${group}
     where (e.booking_id is null and b.status = 'confirmed') or (b.status = 'cancelled' and not e.cancelled)`);
  const byKey = new Map(rows.map((r) => [`${r.topic}:${r.key}`, r]));
  for (const u of uncounted.slice(0, 10)) {
    const m = byKey.get(`${u.what === 'booking' ? 'booking.created' : 'booking.cancelled'}:${u.public_id}`);
    const where = !m
      ? 'no event in the outbox'
      : (inStream.get(m.publicId) ?? 0) > 0
        ? `its event ${m.publicId} is in the stream`
        : m.createdMs < h.lastDeletion && relayed(m)
          ? `its event ${m.publicId} was relayed (outbox ${m.status}) into the stream that was deleted at ${new Date(h.lastDeletion).toISOString()}, before the consumer applied it`
          : `its event ${m.publicId} (outbox ${m.status}) is not in the stream`;
    violations.push(`the ledger does not count the ${u.what} of booking ${u.public_id} (${u.status}, total ${u.total}): ${where}`);
  }
  return { violations, count: Math.max(ledger.length, uncounted.length), uncounted };
}

/** The group's open dead letters: only the forged events may be among them; each forgery refused, none applied. */
async function deadLetterChecks(db: Db, group: string, h: StreamHistory, inStream: Map<string, number>) {
  const dead = await openDeadLetters(db, group, 100_000);
  const deadById = new Map(dead.map((d) => [d.message_id, d]));
  const deadViolations = dead
    .filter((d) => !h.forgedIds.has(d.message_id))
    .map(
      (d) =>
        `${d.message_id} (seq ${d.stream_seq}, ${d.headers['StayHub-Topic'] ?? d.subject}) dead after ${d.deliveries} deliveries: ${d.last_error.slice(0, 300)}`,
    );
  // The inbox lists what the group applied: a forged event must never be in it.
  const { rows: appliedRows } = await db.execute<{ message_id: string }>(
    sql`select message_id from processed_messages
          where consumer_group = ${group} and message_id in (select jsonb_array_elements_text(${JSON.stringify([...h.forgedIds])}::jsonb))`,
  );
  const applied = new Set(appliedRows.map((r) => r.message_id));
  const forgedViolations: string[] = [];
  let refused = 0;
  let gone = 0;
  for (const f of h.forged) {
    const what = `forged ${f.messageId} (${f.kind}: booking ${f.bookingId}, property ${f.propertyId}, total ${f.total}${f.realTotal === null ? '' : ` for a real ${f.realTotal}`}, seq ${f.seq})`;
    const d = deadById.get(f.messageId);
    if (applied.has(f.messageId)) forgedViolations.push(`${what} was applied: it is in the group's inbox`);
    if (!d) {
      // Acknowledged, then gone from the stream before the group read it (a deletion, or the
      // whole cluster restarted before the message reached any node's disk: all three restored
      // 10,314 messages where a forgery had seq 10,316): never offered to the group, nothing to refuse.
      if (!applied.has(f.messageId) && !inStream.has(f.messageId)) gone++;
      else forgedViolations.push(`${what} is not a consumer dead letter`);
    } else if (!/refused/.test(d.last_error))
      forgedViolations.push(`${what} dead-lettered, but not as refused: ${d.last_error.slice(0, 200)}`);
    else if (!applied.has(f.messageId)) refused++;
  }
  return { deadViolations, forgedViolations, dead: dead.length, refused, applied: applied.size, gone };
}

/** The checks on what the run's stage holds after the drain (its stream, group, forgeries and deletions), and their figures. */
export async function checkEvents(o: EventsStage, databaseUrl: string) {
  const h: StreamHistory = {
    forged: o.forged,
    forgedIds: new Set(o.forged.map((f) => f.messageId)),
    lastDeletion: Math.max(-Infinity, ...o.deletions.map((d) => d.at)),
  };
  const database = createDatabase(databaseUrl, { max: 2, applicationName: 'chaos-events-check' });
  try {
    const rows = await messagesAsWritten(database.pool, ['booking.created', 'booking.cancelled']);
    const inStream = await countStream(o.nats.url, o.stream, `${o.subjectPrefix}.booking.>`);
    const once = exactlyOnce(rows, inStream, h);
    const ledger = await ledgerCheck(database.db, o.group, rows, inStream, h);
    const dl = await deadLetterChecks(database.db, o.group, h, inStream);
    const { rows: lines } = await database.db.execute<{ n: number; gaps: number }>(
      sql`select (select count(*)::int from host_earnings where consumer_group = ${o.group}) as n,
                 (select count(*)::int from earnings_bookings where consumer_group = ${o.group} and counted_from = 'gap') as gaps`,
    );
    return {
      checks: [
        checkResult(EVENT_CHECKS.exactlyOnce, once.violations),
        checkResult(EVENT_CHECKS.ledger, ledger.violations, ledger.count),
        checkResult(EVENT_CHECKS.deadLetters, dl.deadViolations),
        checkResult(EVENT_CHECKS.forgedRefused, dl.forgedViolations),
      ],
      figures: {
        // Outbox rows of booking.*, any status; messages under <prefix>.booking.* in the stream, copies included.
        bookingEventsInOutbox: rows.length,
        bookingMessagesInStream: [...inStream.entries()].filter(([id]) => !h.forgedIds.has(id)).reduce((a, [, n]) => a + n, 0),
        // Relayed before a stream deletion and gone with it: allowed, counted here.
        goneWithDeletedStream: once.gone,
        ledgerLines: lines[0]!.n,
        // Open consumer dead letters of the group, the forged events' included.
        deadLetters: dl.dead,
        forged: o.forged.length,
        forgedRefused: dl.refused,
        forgedApplied: dl.applied,
        // Gone from the stream before the group read them: never offered, nothing to refuse.
        forgedGone: dl.gone,
        streamDeletions: o.deletions.length,
        uncountedBookings: ledger.uncounted.filter((u) => u.what === 'booking').length,
        uncountedCancellations: ledger.uncounted.filter((u) => u.what === 'cancellation').length,
        // Counted from the bookings table, their creation never read (the audit found the gap, or a cancellation came first).
        countedAsGaps: lines[0]!.gaps,
      },
    };
  } finally {
    await database.close();
  }
}
