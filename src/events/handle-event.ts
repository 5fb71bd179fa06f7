import { sql } from 'drizzle-orm';
import type { JsMsg } from '@nats-io/jetstream';
import type { Db } from '../db/client.ts';
import { withTransaction, type Tx } from '../db/transaction.ts';
import { PermanentError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { inSpan, MESSAGING, placeAfterHop, SpanKind, SpanStatusCode, tracingOn } from '../telemetry/tracing.ts';
import { recordDeadLetter, openDeadLetters } from './dead-letters.ts';
import { assertKnownSchemaVersion, decodeEvent, fromParts, MalformedEventError, type ConsumedEvent } from './event.ts';
import { claimInbox } from './inbox.ts';
import { backoffDelaySeconds } from '../outbox/index.ts';

/*
 * One event through a consumer group's handler (the rules are at the top of src/events/consumer.ts):
 * applied once with its inbox row, then acked; or redelivered later; or dead-lettered. And the
 * replay of a group's dead letters once their cause is fixed.
 */

/** The effect of one event, inside the transaction that also records it in the inbox. */
export type GroupHandler = (tx: Tx, event: ConsumedEvent, log: Logger) => Promise<void>;

export type EventOutcome = 'applied' | 'duplicate' | 'retry' | 'dead';

/** What handling one event needs (src/events/consumer.ts's GroupRunOptions carry it). */
export interface EventHandling {
  db: Db;
  group: string;
  log: Logger;
  handle: GroupHandler;
  maxDeliver: number;
  /** Test hook: called inside the transaction after the effect, before COMMIT. */
  afterEffect?: (event: ConsumedEvent) => void | Promise<void>;
  /** Test hook: called after COMMIT, before the ack. */
  beforeAck?: (event: ConsumedEvent) => void | Promise<void>;
}

/** Backoff between deliveries of a failing event: 1, 2, 4 … 60 s. */
const redeliveryDelayMs = (deliveries: number) => backoffDelaySeconds(deliveries, { baseSeconds: 1, maxSeconds: 60 }) * 1000;

/**
 * Applies one event once: inbox claim + effect in one transaction. Returns applied or duplicate.
 * An event in a schema version this code does not know throws UnknownSchemaVersionError before
 * anything is written: the consumer dead-letters it at once, with that reason.
 */
export async function applyOnce(
  db: Db,
  group: string,
  event: ConsumedEvent,
  handle: GroupHandler,
  log: Logger,
  afterEffect?: EventHandling['afterEffect'],
): Promise<'applied' | 'duplicate'> {
  assertKnownSchemaVersion(event);
  return withTransaction(db, async (tx) => {
    if (!(await claimInbox(tx, group, event.messageId, event.streamSeq))) return 'duplicate';
    await handle(tx, event, log);
    await afterEffect?.(event);
    return 'applied';
  });
}

/** One message as pulled: decoded (or dead-lettered if it cannot be), then applied and acked, in its trace. */
export async function processMessage(o: EventHandling, m: JsMsg): Promise<EventOutcome> {
  let event: ConsumedEvent;
  try {
    event = decodeEvent(m);
  } catch (err) {
    // Undecodable: no redelivery can fix it. Keep what we can and terminate it.
    const e = err as Error;
    o.log.error({ err: e, seq: m.seq, subject: m.subject }, 'undecodable event; dead-lettered');
    const raw = fromPartsLoose(m);
    await recordDeadLetter(o.db, o.group, raw, `${e.name}: ${e.message}`).catch(() => undefined);
    m.term();
    return 'dead';
  }
  if (!tracingOn()) return applyAndAck(o, m, event);
  // The relay's publish span (its headers) is the parent at the first delivery; a redelivery is a
  // new trace linked to it, as an outbox retry is (docs/adr/0031-retries-start-a-linked-trace.md).
  return inSpan(
    `process ${event.subject}`,
    {
      kind: SpanKind.CONSUMER,
      ...placeAfterHop(storedContextOf(event), event.deliveries <= 1),
      attributes: consumeAttributes(o.group, event),
    },
    async (span) => {
      const outcome = await applyAndAck(o, m, event);
      span?.setAttribute('stayhub.events.outcome', outcome);
      if (outcome === 'retry' || outcome === 'dead') span?.setStatus({ code: SpanStatusCode.ERROR, message: `event ${outcome}` });
      return outcome;
    },
  );
}

/** The trace context the relay put in an event's headers (kept in its dead letter too). */
function storedContextOf(event: ConsumedEvent) {
  return { traceparent: event.headers.traceparent ?? null, tracestate: event.headers.tracestate ?? null };
}

function consumeAttributes(group: string, event: ConsumedEvent) {
  return {
    [MESSAGING.system]: 'nats',
    [MESSAGING.operationType]: 'process',
    [MESSAGING.destination]: event.subject,
    [MESSAGING.messageId]: event.messageId,
    [MESSAGING.consumerGroup]: group,
    [MESSAGING.deliveryCount]: event.deliveries,
  };
}

/** One decoded event: applied once (inbox + effect), then acked; or redelivered later, or dead-lettered. */
async function applyAndAck(o: EventHandling, m: JsMsg, event: ConsumedEvent): Promise<EventOutcome> {
  const log = o.log.child({ messageId: event.messageId, topic: event.topic, seq: event.streamSeq, delivery: event.deliveries });
  try {
    const outcome = await applyOnce(o.db, o.group, event, o.handle, log, o.afterEffect);
    await o.beforeAck?.(event);
    m.ack();
    if (outcome === 'duplicate') log.info('event already applied by this group (redelivery); acked without effect');
    return outcome;
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    const error = `${e.name}: ${e.message}`;
    // A PermanentError (the handler knows no retry helps) is dead at once, as in the outbox worker.
    if (event.deliveries >= o.maxDeliver || err instanceof MalformedEventError || err instanceof PermanentError) {
      try {
        await recordDeadLetter(o.db, o.group, event, error);
      } catch (recordErr) {
        log.error({ err: recordErr }, 'could not record a dead letter; the event will be redelivered');
        m.nak(redeliveryDelayMs(event.deliveries));
        return 'retry';
      }
      log.error({ err: e }, `event failed ${event.deliveries} time(s); recorded as a consumer dead letter`);
      m.term(); // no reason text: nats-server before 2.10 does not parse "+TERM <reason>" and would redeliver
      return 'dead';
    }
    log.warn({ err: e }, 'event failed; it will be redelivered');
    m.nak(redeliveryDelayMs(event.deliveries));
    return 'retry';
  }
}

function fromPartsLoose(m: JsMsg): ConsumedEvent {
  const headers: Record<string, string> = {};
  for (const [k, v] of m.headers ?? []) if (v[0] !== undefined) headers[k] = v[0];
  return {
    messageId: headers['Nats-Msg-Id'] ?? `seq-${m.seq}`,
    subject: m.subject,
    topic: m.subject,
    key: null,
    occurredAt: null,
    schemaVersion: null,
    streamSeq: m.seq,
    deliveries: m.info.deliveryCount,
    headers,
    body: m.string(),
  };
}

/**
 * Replays a group's open dead letters through its handler, oldest first, each in one transaction
 * with its inbox row and its `replayed_at`. An event another path already applied counts as
 * replayed. Returns how many were applied, skipped as duplicates, and still failing.
 */
export async function replayDeadLetters(db: Db, group: string, handle: GroupHandler, log: Logger) {
  const result = { applied: 0, duplicate: 0, failed: 0 };
  for (const row of await openDeadLetters(db, group)) {
    const event = fromParts({
      subject: row.subject,
      headers: row.headers,
      data: row.data,
      streamSeq: row.stream_seq,
      deliveries: row.deliveries,
    });
    try {
      // Still a version this code does not know: it stays open, with the reason.
      assertKnownSchemaVersion(event);
      // A replay is a new trace, linked to the one the dead letter kept in its headers.
      const outcome = await inSpan(
        `process ${event.subject}`,
        { kind: SpanKind.CONSUMER, ...placeAfterHop(storedContextOf(event), false), attributes: consumeAttributes(group, event) },
        () =>
          withTransaction(db, async (tx) => {
            const fresh = await claimInbox(tx, group, event.messageId, event.streamSeq);
            if (fresh) await handle(tx, event, log.child({ messageId: event.messageId, replay: true }));
            await tx.execute(sql`update consumer_dead_letters set replayed_at = now() where id = ${row.id}`);
            return fresh ? ('applied' as const) : ('duplicate' as const);
          }),
      );
      result[outcome]++;
    } catch (err) {
      result.failed++;
      await db.execute(
        sql`update consumer_dead_letters set last_error = ${String((err as Error).message).slice(0, 4000)} where id = ${row.id}`,
      );
    }
  }
  return result;
}
