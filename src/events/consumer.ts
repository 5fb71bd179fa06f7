import { setTimeout as sleep } from 'node:timers/promises';
import {
  JetStreamApiCodes,
  JetStreamApiError,
  JetStreamError,
  jetstream,
  jetstreamManager,
  type Consumer,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { ConsumedEvent } from './event.ts';
import { jetStreamElecting, onceJetStreamAnswers } from './connection.ts';
import { ensureGroup, GroupConfigError, type GroupOptions } from './group.ts';
import { processMessage, type EventHandling, type EventOutcome } from './handle-event.ts';
import { backoffDelaySeconds } from '../outbox/index.ts';
import { DELETED_STREAM_SETTLE_MS, ensureStream, StreamConfigError } from './stream.ts';

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

export interface GroupRunner {
  /** Stops pulling, finishes the event in hand, resolves when the loop has ended. */
  stop(): Promise<void>;
  /** Resolves when the loop ends (stop, or the connection closed). */
  done: Promise<void>;
}

export interface GroupRunOptions extends GroupOptions, EventHandling {
  nc: NatsConnection;
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

/**
 * True for what a pull loop (consume with abort_on_missing_resource) ends with when the group's
 * durable or the stream is deleted: the server's 409 "consumer deleted" to the waiting pull, or
 * "not found" from the client's own check after missed heartbeats.
 */
function groupMissing(err: unknown): boolean {
  if (err instanceof JetStreamApiError)
    return err.code === JetStreamApiCodes.ConsumerNotFound || err.code === JetStreamApiCodes.StreamNotFound;
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
export async function runGroup(o: GroupRunOptions): Promise<GroupRunner> {
  const jsm = await onceJetStreamAnswers('JetStream API', () => jetstreamManager(o.nc), { log: o.log });
  const run: RunningGroup = {
    o,
    js: jetstream(o.nc),
    jsm,
    // What the stream is recreated with if it is deleted: its settings as last seen, here or by the
    // caller's start-up (a deletion can land between the two).
    streamConfig: (await jsm.streams.info(o.stream).catch(() => undefined))?.config ?? o.streamAtStart,
    consumer: undefined,
    messages: undefined,
    stopping: false,
    waiting: new AbortController(),
  };
  const done = pullUntilStopped(run);
  return {
    done,
    async stop() {
      run.stopping = true;
      run.waiting.abort();
      run.messages?.stop();
      await done.catch(() => undefined);
    },
  };
}

/** What a running group keeps between its pulls. */
interface RunningGroup {
  o: GroupRunOptions;
  js: JetStreamClient;
  jsm: JetStreamManager;
  streamConfig: StreamConfig | undefined;
  consumer: Consumer | undefined;
  messages: ConsumerMessages | undefined;
  stopping: boolean;
  /** Aborted on stop: ends every wait at once. */
  waiting: AbortController;
}

/** A pause that a stop cuts short. */
const pause = (run: RunningGroup, ms: number) => sleep(ms, undefined, { signal: run.waiting.signal }).catch(() => undefined);

/** The pull loop: batch after batch, each event in order, until a stop or the connection closes. */
async function pullUntilStopped(run: RunningGroup): Promise<void> {
  const { o } = run;
  while (!run.stopping) {
    try {
      run.consumer ??= await run.js.consumers.get(o.stream, o.group);
      // abort_on_missing_resource: a deleted durable or stream ends the loop with an error
      // instead of the client polling for it forever while the process looks alive.
      run.messages = await run.consumer.consume({ max_messages: o.batchSize, expires: 5000, abort_on_missing_resource: true });
      for await (const m of run.messages) {
        const outcome = await processMessage(o, m).catch((err) => {
          o.log.error({ err: err, seq: m.seq }, 'event processing failed unexpectedly; redelivery after the ack wait');
          return 'retry' as const;
        });
        o.onOutcome?.(outcome, null);
        if (run.stopping) break;
      }
    } catch (err) {
      if (run.stopping || o.nc.isClosed()) break;
      // The group's durable has no leader for a moment (its node lost, the others electing one):
      // ask again shortly rather than end the group.
      if (jetStreamElecting(err)) {
        o.log.warn({ err }, 'JetStream is not answering for the consumer group (a cluster electing its leader?): pulling again shortly');
        run.consumer = undefined;
        await pause(run, 500);
        continue;
      }
      if (!groupMissing(err)) throw err;
      run.consumer = undefined;
      await recreateGroup(run, err as Error);
      continue;
    }
    if (o.nc.isClosed()) break;
  }
}

/**
 * The group's durable (or its stream) was deleted: recreates them, retrying while NATS does not
 * answer; a GroupGoneError when the server answers that it cannot be done.
 */
async function recreateGroup(run: RunningGroup, cause: Error): Promise<void> {
  const { o } = run;
  for (let attempt = 1; !run.stopping && !o.nc.isClosed(); attempt++) {
    try {
      await recreateOnce(run, cause);
      return;
    } catch (err) {
      // The server answered, and said no: trying again changes nothing. (Its "not now" is waited
      // out, and so is a stream deleted again while this recreated the group on it: seen in a
      // chaos run, the stream answered for its info, then the durable's creation got "stream not
      // found"; the next try finds it gone and recreates it.)
      const answeredNo = err instanceof StreamConfigError || err instanceof GroupConfigError || err instanceof JetStreamApiError;
      const deletedMeanwhile = err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
      if (answeredNo && !jetStreamElecting(err) && !deletedMeanwhile) {
        throw new GroupGoneError(
          `consumer group ${o.group} on stream ${o.stream} is gone (${cause.message}) and cannot be recreated: ${(err as Error).message}`,
          { cause: err },
        );
      }
      o.log.error({ err, attempt }, 'could not recreate the consumer group yet (NATS unreachable?); trying again');
      await pause(run, backoffDelaySeconds(attempt, { baseSeconds: 0.5, maxSeconds: 30 }) * 1000);
    }
  }
}

async function recreateOnce(run: RunningGroup, cause: Error): Promise<void> {
  const { o, jsm } = run;
  const streamGone = await jsm.streams.info(o.stream).then(
    (info) => {
      run.streamConfig = info.config;
      return false;
    },
    (err: unknown) => {
      if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return true;
      throw err;
    },
  );
  o.log.error(
    { stream: o.stream, cause: cause.message },
    streamGone
      ? `the events stream is gone (deleted); recreating it as it was, and the group on it. Events it held that the group had not acked are lost${o.onGroupLost ? ' to the stream; what they brought is rebuilt first' : ''}`
      : "the group's durable consumer is gone (deleted); recreating it from the stream's first event (the inbox skips what was applied)",
  );
  if (!run.streamConfig) throw new StreamConfigError(`stream ${o.stream} does not exist and this process never saw its settings`);
  if (streamGone) await pause(run, DELETED_STREAM_SETTLE_MS);
  if (run.stopping) return;
  await ensureStream(jsm, { ...run.streamConfig, name: o.stream }, { log: o.log });
  await o.onGroupLost?.(streamGone ? 'stream deleted' : 'group deleted');
  await ensureGroup(jsm, o, { from: 'start' }, o.log);
  o.log.warn({ stream: o.stream }, 'consumer group recreated; consuming again');
}

export { jetstreamManager };
