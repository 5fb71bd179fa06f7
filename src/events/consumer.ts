import { sql } from 'drizzle-orm';
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type ConsumerInfo,
  type ConsumerMessages,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { nanos, type NatsConnection } from '@nats-io/transport-node';
import type { Db } from '../db/client.ts';
import { withTransaction, type Tx } from '../db/transaction.ts';
import { PermanentError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { recordDeadLetter, openDeadLetters } from './dead-letters.ts';
import { decodeEvent, fromParts, MalformedEventError, type ConsumedEvent } from './event.ts';
import { claimInbox } from './inbox.ts';
import { backoffDelaySeconds } from '../outbox/index.ts';

/*
 * Durable consumer groups over the events stream. A group is a JetStream durable pull consumer of
 * the same name: the server keeps its position, so the group resumes where it stopped, and several
 * processes of one group share its events (each event to one of them). Different groups never see
 * each other: each has its own position, acks and redeliveries.
 *
 * Per event: BEGIN; insert (group, message id) into the inbox; if it was new, run the handler's
 * effect; COMMIT; then ack. So
 * - killed before COMMIT: nothing happened; no ack, the server redelivers after the ack wait;
 * - killed after COMMIT, before the ack: redelivered, the inbox row is there, skipped, acked;
 * - the handler throws: rolled back; nak with a delay (redelivered); on delivery EVENTS_MAX_DELIVER
 *   it is recorded in consumer_dead_letters and terminated: visible, and replayable
 *   (`replayDeadLetters`) once the cause is fixed.
 * The server's own max_deliver is left unlimited on purpose: if recording the dead letter fails
 * (database down), the event must come back, not be dropped by the server.
 */

/** The effect of one event, inside the transaction that also records it in the inbox. */
export type GroupHandler = (tx: Tx, event: ConsumedEvent, log: Logger) => Promise<void>;

export interface GroupOptions {
  stream: string;
  group: string;
  /** Subjects this group reads (one filter; NATS 2.9 takes a single filter subject). */
  filterSubject: string;
  ackWaitSeconds: number;
  maxDeliver: number;
  batchSize: number;
}

export type EventOutcome = 'applied' | 'duplicate' | 'retry' | 'dead';

export interface GroupRunner {
  /** Stops pulling, finishes the event in hand, resolves when the loop has ended. */
  stop(): Promise<void>;
  /** Resolves when the loop ends (stop, or the connection closed). */
  done: Promise<void>;
}

export interface RunOptions extends GroupOptions {
  nc: NatsConnection;
  db: Db;
  log: Logger;
  handle: GroupHandler;
  onOutcome?: (outcome: EventOutcome, event: ConsumedEvent | null) => void;
  /** Test hook: called inside the transaction after the effect, before COMMIT. */
  afterEffect?: (event: ConsumedEvent) => void | Promise<void>;
  /** Test hook: called after COMMIT, before the ack. */
  beforeAck?: (event: ConsumedEvent) => void | Promise<void>;
}

/** Where a (re)created group starts: the stream's first event, or the first at or after a time. */
export type StartAt = { from: 'start' } | { from: 'time'; time: Date };

/**
 * Creates the group's durable consumer if it is missing, or updates its ack wait. An existing group
 * keeps its position. (`resetGroup` deletes and recreates it to move the position.)
 */
export async function ensureGroup(jsm: JetStreamManager, o: GroupOptions, start: StartAt = { from: 'start' }): Promise<ConsumerInfo> {
  const config = {
    durable_name: o.group,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(o.ackWaitSeconds * 1000),
    max_deliver: -1,
    filter_subject: o.filterSubject,
    // Enough outstanding for one pull batch per process of the group.
    max_ack_pending: Math.max(1000, o.batchSize * 10),
    ...(start.from === 'time'
      ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.time.toISOString() }
      : { deliver_policy: DeliverPolicy.All }),
  };
  try {
    const current = await jsm.consumers.info(o.stream, o.group);
    if (current.config.ack_wait === config.ack_wait && current.config.filter_subject === config.filter_subject) return current;
    return await jsm.consumers.update(o.stream, o.group, { ack_wait: config.ack_wait, filter_subject: config.filter_subject });
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === 10014)) throw err; // 10014: consumer not found
    return jsm.consumers.add(o.stream, config);
  }
}

/** Moves a group's position: deletes its durable consumer and creates it again at `start`. */
export async function resetGroup(jsm: JetStreamManager, o: GroupOptions, start: StartAt): Promise<ConsumerInfo> {
  await jsm.consumers.delete(o.stream, o.group).catch((err) => {
    if (!(err instanceof JetStreamApiError && err.code === 10014)) throw err;
  });
  return ensureGroup(jsm, o, start);
}

/** Backoff between deliveries of a failing event: 1, 2, 4 … 60 s. */
const redeliveryDelayMs = (deliveries: number) => backoffDelaySeconds(deliveries, { baseSeconds: 1, maxSeconds: 60 }) * 1000;

/** Applies one event once: inbox claim + effect in one transaction. Returns applied or duplicate. */
export async function applyOnce(
  db: Db,
  group: string,
  event: ConsumedEvent,
  handle: GroupHandler,
  log: Logger,
  afterEffect?: RunOptions['afterEffect'],
): Promise<'applied' | 'duplicate'> {
  return withTransaction(db, async (tx) => {
    if (!(await claimInbox(tx, group, event.messageId, event.streamSeq))) return 'duplicate';
    await handle(tx, event, log);
    await afterEffect?.(event);
    return 'applied';
  });
}

async function processMessage(o: RunOptions, m: JsMsg): Promise<EventOutcome> {
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
 * Runs a group: pulls batches (EVENTS_BATCH_SIZE) and handles them one at a time, in stream order,
 * each in its own transaction. One process of a group keeps per-key order; several processes of a
 * group share the load but then only the commutative effects (like the ledger's increments) stay
 * right in any order.
 */
export async function runGroup(o: RunOptions): Promise<GroupRunner> {
  const js = jetstream(o.nc);
  const consumer = await js.consumers.get(o.stream, o.group);
  let stopping = false;
  let messages: ConsumerMessages | undefined;
  const done = (async () => {
    while (!stopping) {
      messages = await consumer.consume({ max_messages: o.batchSize, expires: 5000 });
      for await (const m of messages) {
        const outcome = await processMessage(o, m).catch((err) => {
          o.log.error({ err: err, seq: m.seq }, 'event processing failed unexpectedly; redelivery after the ack wait');
          return 'retry' as const;
        });
        o.onOutcome?.(outcome, null);
        if (stopping) break;
      }
      if (o.nc.isClosed()) break;
    }
  })();
  return {
    done,
    async stop() {
      stopping = true;
      messages?.stop();
      await done.catch(() => undefined);
    },
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
    const event = fromParts({ subject: row.subject, headers: row.headers, data: row.data, streamSeq: row.stream_seq, deliveries: row.deliveries });
    try {
      const outcome = await withTransaction(db, async (tx) => {
        const fresh = await claimInbox(tx, group, event.messageId, event.streamSeq);
        if (fresh) await handle(tx, event, log.child({ messageId: event.messageId, replay: true }));
        await tx.execute(sql`update consumer_dead_letters set replayed_at = now() where id = ${row.id}`);
        return fresh ? 'applied' : 'duplicate';
      });
      result[outcome]++;
    } catch (err) {
      result.failed++;
      await db.execute(sql`update consumer_dead_letters set last_error = ${String((err as Error).message).slice(0, 4000)} where id = ${row.id}`);
    }
  }
  return result;
}

export { jetstreamManager };
