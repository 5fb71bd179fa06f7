import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'drizzle-orm';
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  JetStreamError,
  ReplayPolicy,
  jetstream,
  jetstreamManager,
  type Consumer,
  type ConsumerConfig,
  type ConsumerInfo,
  type ConsumerMessages,
  type JetStreamManager,
  type JsMsg,
  type StreamConfig,
} from '@nats-io/jetstream';
import { nanos, type NatsConnection } from '@nats-io/transport-node';
import { ConfigError } from '../config.ts';
import type { Db } from '../db/client.ts';
import { withTransaction, type Tx } from '../db/transaction.ts';
import { PermanentError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { inSpan, MESSAGING, placeAfterHop, SpanKind, SpanStatusCode, tracingOn } from '../telemetry/tracing.ts';
import { recordDeadLetter, openDeadLetters } from './dead-letters.ts';
import { assertKnownSchemaVersion, decodeEvent, fromParts, MalformedEventError, type ConsumedEvent } from './event.ts';
import { claimInbox } from './inbox.ts';
import { jetStreamElecting, onceJetStreamAnswers } from './connection.ts';
import { backoffDelaySeconds } from '../outbox/index.ts';
import { DELETED_STREAM_SETTLE_MS, describeDifferences, ensureStream, StreamConfigError, type SettingDifference } from './stream.ts';

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
  /**
   * Called when the group's durable consumer (or the stream under it) was deleted while the group
   * ran, once the stream is back and before the group is recreated from its first event. Events
   * the group had not acked may be gone with the old stream: a group whose effects can be derived
   * again (the earnings ledger, from the bookings table) rebuilds them here. A throw is retried.
   */
  onGroupLost?: (why: 'stream deleted' | 'group deleted') => Promise<void>;
  /**
   * The stream's settings as the caller last saw them (what its own start-up declared). The group
   * recreates a deleted stream from what it read itself; this is the fallback when the stream
   * was deleted, or JetStream did not answer, before the group ever read it.
   */
  streamAtStart?: StreamConfig;
  /** Test hook: called inside the transaction after the effect, before COMMIT. */
  afterEffect?: (event: ConsumedEvent) => void | Promise<void>;
  /** Test hook: called after COMMIT, before the ack. */
  beforeAck?: (event: ConsumedEvent) => void | Promise<void>;
}

/** Where a (re)created group starts: the stream's first event, or the first at or after a time. */
export type StartAt = { from: 'start' } | { from: 'time'; time: Date };

/**
 * An existing durable consumer whose settings would lose, drop or stall the group's events and
 * that JetStream cannot change in place. A configuration problem (exit 2), named field by field.
 */
export class GroupConfigError extends ConfigError {
  readonly code = 'events_group_mismatch';
  constructor(message: string) {
    super([message]);
    this.message = message;
    this.name = 'GroupConfigError';
  }
}

/** The durable consumer a group wants (ensureGroup compares an existing one with it). */
function desiredGroup(o: GroupOptions, start: StartAt) {
  return {
    durable_name: o.group,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(o.ackWaitSeconds * 1000),
    // Unlimited on purpose (see the top of this file): the group dead-letters at o.maxDeliver.
    max_deliver: -1,
    filter_subject: o.filterSubject,
    // Enough outstanding for one pull batch per process of the group.
    max_ack_pending: Math.max(1000, o.batchSize * 10),
    replay_policy: ReplayPolicy.Instant,
    ...(start.from === 'time'
      ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.time.toISOString() }
      : { deliver_policy: DeliverPolicy.All }),
  } satisfies Partial<ConsumerConfig>;
}

/**
 * Where an existing group may start: from the beginning, or from a time or a sequence (what a
 * replay sets). "new" and "last…" skipped the events that were in the stream when it was created.
 */
const KEEPS_EVERY_EVENT: string[] = [DeliverPolicy.All, DeliverPolicy.StartTime, DeliverPolicy.StartSequence];

/** Every setting of an existing durable that can lose, drop or stall the group's events. */
function groupDifferences(have: ConsumerConfig, want: ReturnType<typeof desiredGroup>): SettingDifference[] {
  const out: SettingDifference[] = [];
  const check = (field: string, differs: boolean, h: unknown, w: unknown, fixedInPlace = true) => {
    if (differs) out.push({ field, have: String(h), want: String(w), fixedInPlace });
  };
  const seconds = (ns: number | undefined) => `${(ns ?? 0) / 1e9} s`;
  // "none" and "all" acknowledge events nobody handled: a crash loses them. JetStream cannot change it.
  check('ack_policy', have.ack_policy !== want.ack_policy, have.ack_policy, want.ack_policy, false);
  check('deliver_policy', !KEEPS_EVERY_EVENT.includes(have.deliver_policy), have.deliver_policy, want.deliver_policy, false);
  // "original" hands events out at the pace they were published: a backlog never catches up.
  check(
    'replay_policy',
    (have.replay_policy ?? ReplayPolicy.Instant) !== want.replay_policy,
    have.replay_policy,
    want.replay_policy,
    false,
  );
  // A push consumer of the same name: pulls fail, the group reads nothing.
  check('deliver_subject', Boolean(have.deliver_subject), have.deliver_subject, '(none: a pull consumer)', false);
  // The server stops redelivering after max_deliver: the event is dropped without a dead letter.
  check('max_deliver', (have.max_deliver ?? -1) !== want.max_deliver, have.max_deliver ?? -1, want.max_deliver);
  check('ack_wait', have.ack_wait !== want.ack_wait, seconds(have.ack_wait), seconds(want.ack_wait));
  const filter = have.filter_subjects?.length ? have.filter_subjects.join(', ') : (have.filter_subject ?? '');
  check('filter_subject', filter !== want.filter_subject, filter || '(none)', want.filter_subject);
  // Fewer outstanding than one pull batch per process stalls the group behind one slow event.
  const pending = have.max_ack_pending ?? -1;
  check('max_ack_pending', pending !== -1 && pending < want.max_ack_pending, pending, want.max_ack_pending);
  // Bodies left out: every event fails to decode and is dead-lettered.
  check('headers_only', have.headers_only === true, true, false);
  // Pull requests over these limits are refused: the group stalls.
  check('max_batch', (have.max_batch ?? 0) > 0, have.max_batch, '0 (no limit)');
  check('max_expires', (have.max_expires ?? 0) > 0, seconds(have.max_expires), '0 (no limit)');
  // The server deletes an idle durable, and the group's position with it.
  check('inactive_threshold', (have.inactive_threshold ?? 0) > 0, seconds(have.inactive_threshold), '0 (never)');
  return out;
}

/**
 * Creates the group's durable consumer if it is missing. An existing one keeps its position, and
 * is compared with the configuration: every setting that can lose, drop or stall events
 * (groupDifferences) that JetStream can change in place is changed (and logged); when one cannot
 * be, nothing is changed and a GroupConfigError names every difference.
 * (`resetGroup` deletes and recreates the group to move the position.)
 */
export async function ensureGroup(
  jsm: JetStreamManager,
  o: GroupOptions,
  start: StartAt = { from: 'start' },
  log?: Logger,
): Promise<ConsumerInfo> {
  const want = desiredGroup(o, start);
  let current: ConsumerInfo;
  try {
    current = await jsm.consumers.info(o.stream, o.group);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === 10014)) throw err; // 10014: consumer not found
    return jsm.consumers.add(o.stream, want);
  }
  const differences = groupDifferences(current.config, want);
  if (differences.length === 0) return current;
  if (differences.some((d) => !d.fixedInPlace)) {
    throw new GroupConfigError(
      `consumer group ${o.group} on stream ${o.stream} does not match the configuration: ${describeDifferences(differences)}. ` +
        `JetStream cannot change some of these in place: rebuild the group (consume:earnings --group ${o.group} --replay, ` +
        `or --replay --from a time) or remove its consumer (nats consumer rm ${o.stream} ${o.group})`,
    );
  }
  const updated = await jsm.consumers.update(o.stream, o.group, {
    ack_wait: want.ack_wait,
    max_deliver: want.max_deliver,
    filter_subject: want.filter_subject,
    ...(differences.some((d) => d.field === 'filter_subject') && current.config.filter_subjects?.length ? { filter_subjects: [] } : {}),
    max_ack_pending: differences.some((d) => d.field === 'max_ack_pending') ? want.max_ack_pending : current.config.max_ack_pending,
    headers_only: false,
    max_batch: 0,
    max_expires: 0,
    inactive_threshold: 0,
  });
  log?.warn({ stream: o.stream, changed: describeDifferences(differences) }, 'consumer group settings brought back to the configuration');
  return updated;
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
  afterEffect?: RunOptions['afterEffect'],
): Promise<'applied' | 'duplicate'> {
  assertKnownSchemaVersion(event);
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
async function applyAndAck(o: RunOptions, m: JsMsg, event: ConsumedEvent): Promise<EventOutcome> {
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
 * The group's durable consumer, or the stream under it, disappeared while the group ran and could
 * not be recreated. Ends runGroup's `done`: the process exits non-zero with this message rather
 * than staying up consuming nothing.
 */
export class GroupGoneError extends Error {
  readonly code = 'events_group_gone';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'GroupGoneError';
  }
}

const CONSUMER_NOT_FOUND = 10014;
const STREAM_NOT_FOUND = 10059;

/**
 * True for what a pull loop (consume with abort_on_missing_resource) ends with when the group's
 * durable or the stream is deleted: the server's 409 "consumer deleted" to the waiting pull, or
 * "not found" from the client's own check after missed heartbeats.
 */
function groupMissing(err: unknown): boolean {
  if (err instanceof JetStreamApiError) return err.code === CONSUMER_NOT_FOUND || err.code === STREAM_NOT_FOUND;
  return err instanceof JetStreamError && (err as { code?: unknown }).code === 409 && /consumer deleted/i.test(err.message);
}

/**
 * Runs a group: pulls batches (EVENTS_BATCH_SIZE) and handles them one at a time, in stream order,
 * each in its own transaction. One process of a group keeps per-key order; several processes of a
 * group share the load but then only the commutative effects (like the ledger's increments) stay
 * right in any order.
 *
 * When the group's durable consumer is deleted under it, it recreates it from the stream's first
 * event (the inbox skips what the group already applied); when the stream itself is deleted, it
 * recreates the stream as it last saw it (the relay's settings, duplicate window included) and the
 * group on it. What cannot be recreated (a sealed stream, settings JetStream cannot change, an API
 * error) ends `done` with a GroupGoneError; the server unreachable meanwhile is waited out.
 */
export async function runGroup(o: RunOptions): Promise<GroupRunner> {
  const js = jetstream(o.nc);
  const jsm = await onceJetStreamAnswers('JetStream API', () => jetstreamManager(o.nc), { log: o.log });
  // What the stream is recreated with if it is deleted: its settings as last seen, here or by the
  // caller's start-up (a deletion can land between the two).
  let streamConfig: StreamConfig | undefined = (await jsm.streams.info(o.stream).catch(() => undefined))?.config ?? o.streamAtStart;
  let consumer: Consumer | undefined;
  let stopping = false;
  let messages: ConsumerMessages | undefined;
  const waiting = new AbortController();

  const recreate = async (cause: Error) => {
    for (let attempt = 1; !stopping && !o.nc.isClosed(); attempt++) {
      try {
        const streamGone = await jsm.streams.info(o.stream).then(
          (info) => {
            streamConfig = info.config;
            return false;
          },
          (err: unknown) => {
            if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return true;
            throw err;
          },
        );
        o.log.error(
          { stream: o.stream, cause: cause.message },
          streamGone
            ? `the events stream is gone (deleted); recreating it as it was, and the group on it. Events it held that the group had not acked are lost${o.onGroupLost ? ' to the stream; what they brought is rebuilt first' : ''}`
            : "the group's durable consumer is gone (deleted); recreating it from the stream's first event (the inbox skips what was applied)",
        );
        if (!streamConfig) throw new StreamConfigError(`stream ${o.stream} does not exist and this process never saw its settings`);
        if (streamGone) await sleep(DELETED_STREAM_SETTLE_MS, undefined, { signal: waiting.signal }).catch(() => undefined);
        if (stopping) return;
        await ensureStream(jsm, { ...streamConfig, name: o.stream }, { log: o.log });
        await o.onGroupLost?.(streamGone ? 'stream deleted' : 'group deleted');
        await ensureGroup(jsm, o, { from: 'start' }, o.log);
        o.log.warn({ stream: o.stream }, 'consumer group recreated; consuming again');
        return;
      } catch (err) {
        // The server answered, and said no: trying again changes nothing.
        if (err instanceof StreamConfigError || err instanceof GroupConfigError || err instanceof JetStreamApiError) {
          throw new GroupGoneError(
            `consumer group ${o.group} on stream ${o.stream} is gone (${cause.message}) and cannot be recreated: ${(err as Error).message}`,
            { cause: err },
          );
        }
        o.log.error({ err, attempt }, 'could not recreate the consumer group yet (NATS unreachable?); trying again');
        await sleep(backoffDelaySeconds(attempt, { baseSeconds: 0.5, maxSeconds: 30 }) * 1000, undefined, { signal: waiting.signal }).catch(
          () => undefined,
        );
      }
    }
  };

  const done = (async () => {
    while (!stopping) {
      try {
        consumer ??= await js.consumers.get(o.stream, o.group);
        // abort_on_missing_resource: a deleted durable or stream ends the loop with an error
        // instead of the client polling for it forever while the process looks alive.
        messages = await consumer.consume({ max_messages: o.batchSize, expires: 5000, abort_on_missing_resource: true });
        for await (const m of messages) {
          const outcome = await processMessage(o, m).catch((err) => {
            o.log.error({ err: err, seq: m.seq }, 'event processing failed unexpectedly; redelivery after the ack wait');
            return 'retry' as const;
          });
          o.onOutcome?.(outcome, null);
          if (stopping) break;
        }
      } catch (err) {
        if (stopping || o.nc.isClosed()) break;
        // The group's durable has no leader for a moment (its node lost, the others electing one):
        // ask again shortly rather than end the group.
        if (jetStreamElecting(err)) {
          o.log.warn({ err }, 'JetStream is not answering for the consumer group (a cluster electing its leader?): pulling again shortly');
          consumer = undefined;
          await sleep(500, undefined, { signal: waiting.signal }).catch(() => undefined);
          continue;
        }
        if (!groupMissing(err)) throw err;
        consumer = undefined;
        await recreate(err as Error);
        continue;
      }
      if (o.nc.isClosed()) break;
    }
  })();
  return {
    done,
    async stop() {
      stopping = true;
      waiting.abort();
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

export { jetstreamManager };
