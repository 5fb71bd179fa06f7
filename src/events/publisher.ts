import { setTimeout as sleep } from 'node:timers/promises';
import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { injectTraceContext, inSpan, MESSAGING, SpanKind, tracingOn } from '../telemetry/tracing.ts';
import {
  jetstream,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type StreamInfo,
} from '@nats-io/jetstream';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import { PublishCircuit } from './circuit.ts';
import { EventsUnavailableError } from './errors.ts';
import { closeNats, connectNats, describeNats, describeNatsFailure, jetStreamNotNow } from './connection.ts';
import { EventsStreamMissingError, EventsStreamUnavailableError, natsAway, nobodyAnswered, refused } from './publish-failures.ts';
import { DELETED_STREAM_SETTLE_MS, desiredStream, ensureStream, holdsEvery, StreamConfigError } from './stream.ts';
import { HEADERS } from './subjects.ts';
import { askStreamLeaderToStepDown, STEP_DOWN_AFTER_TIMEOUTS, StuckLeaderWatch } from './stuck-leader.ts';

/** One event as the log receives it. */
export interface OutgoingEvent {
  subject: string;
  /** The outbox message's public id: the log's deduplication key (Nats-Msg-Id). */
  messageId: string;
  topic: string;
  key: string | null;
  occurredAt: Date;
  schemaVersion: number;
  body: unknown;
}

export interface PublishResult {
  /** Position in the log. For a duplicate: the original's. */
  seq: number;
  /** The log already had this message id: an earlier attempt was stored. Success, not an error. */
  duplicate: boolean;
}

/**
 * The publishing side of the relay, kept small so a log other than JetStream (Kafka: an idempotent
 * producer keyed by `key`, header `messageId`) can be dropped in. Contract:
 * - `publish` resolves only once the log has durably stored the event (or already had it), and
 *   rejects otherwise; concurrent calls must be pipelined, not serialised.
 * - publishing the same messageId twice stores it once (within the log's duplicate window).
 */
export interface EventPublisher {
  /** Connects and creates/updates the stream. Throws StreamConfigError for a configuration the log refuses. */
  prepare(): Promise<void>;
  publish(event: OutgoingEvent): Promise<PublishResult>;
  close(): Promise<void>;
}

export interface JetStreamPublisherOptions {
  /** The connection's name, as the server's monitoring shows it (default stayhub-relay). */
  connectionName?: string;
  /**
   * `prepare` rejects when the server cannot be reached, instead of logging it and leaving the
   * connection to the next publish: for a one-off command (the backfill), which has nothing to
   * wait for, unlike the worker.
   */
  requireServerAtStart?: boolean;
  /**
   * Whether this process sets the stream's relay settings (subjects, max age, replicas, the
   * duplicate window: StreamRole in stream.ts). True for the worker's relay, the default; a
   * one-off publisher beside it passes false, so it never rewrites the worker's window from its
   * own environment (it still creates the stream when there is none).
   */
  ownsStream?: boolean;
}

/**
 * The JetStream publisher. The connection is made on first use and, when the server was
 * unreachable, on the next use again; after that the client reconnects by itself. Each publish is
 * a request that the server answers with a PubAck once the message is stored: many can be
 * outstanding on the one connection, so the worker's concurrent handlers make a pipeline.
 *
 * A publish that finds no stream for its subject brings the stream back (ensureStream, this
 * publisher's configuration) and is sent once more; when the stream cannot be brought back it
 * fails with EventsStreamMissingError, and the outbox retries it. When it is back and still nobody
 * takes the event, the stream has no leader: EventsStreamUnavailableError, NATS away for now; when
 * that outlasts an election, its leader is asked to step down (src/events/stuck-leader.ts).
 */
export function createJetStreamPublisher(config: Config, logger: Logger, options: JetStreamPublisherOptions = {}): EventPublisher {
  return new JetStreamPublisher(config, logger, options);
}

interface Connection {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  probe: JetStreamManager;
}

class JetStreamPublisher implements EventPublisher {
  private readonly url: string;
  /** The server as logs and errors name it (no credentials). */
  private readonly where: string;
  private readonly log: Logger;
  private readonly role: 'reader' | 'relay';
  private readonly circuit: PublishCircuit;
  private ready: Promise<Connection> | undefined;
  private restoring: Promise<void> | undefined;
  /** When the stream was last found and declared again after a publish found nobody. */
  private redeclaredAt = Number.NEGATIVE_INFINITY;
  private readonly stuck: StuckLeaderWatch;
  private closed = false;

  constructor(
    private readonly config: Config,
    logger: Logger,
    private readonly options: JetStreamPublisherOptions,
  ) {
    const url = config.NATS_URL;
    if (!url) throw new Error('createJetStreamPublisher needs NATS_URL');
    this.url = url;
    this.where = describeNats(url);
    const log = logger.child({ component: 'events-relay', nats: this.where });
    this.log = log;
    this.role = options.ownsStream === false ? 'reader' : 'relay';
    this.stuck = new StuckLeaderWatch(STEP_DOWN_AFTER_TIMEOUTS * config.EVENTS_PUBLISH_TIMEOUT_MS);
    this.circuit = new PublishCircuit(this.where, {
      stallMs: Math.min(config.EVENTS_STALL_MS, config.EVENTS_PUBLISH_TIMEOUT_MS / 2),
      onOpen: (why) => log.warn({ why }, 'NATS is not taking publishes: relayed events wait in the outbox until it answers'),
      onClose: (awayMs) => log.info({ awaySeconds: Math.round(awayMs / 1000) }, 'NATS answers again: relaying'),
    });
  }

  async prepare(): Promise<void> {
    try {
      await this.connection();
    } catch (err) {
      if (err instanceof StreamConfigError || this.options.requireServerAtStart) throw err;
      // Unreachable or not ready at start is not fatal: messages wait and retry until it is.
      if (jetStreamNotNow(err)) {
        this.log.warn(
          { err, replicas: this.config.EVENTS_REPLICAS },
          'JetStream cannot take the events stream yet (a cluster electing, or fewer nodes up than EVENTS_REPLICAS); relayed messages wait',
        );
      } else this.log.warn({ err }, 'NATS unreachable at start; relayed messages will retry');
    }
  }

  /** The publish, in a producer span when tracing is on. */
  publish(event: OutgoingEvent): Promise<PublishResult> {
    if (!tracingOn()) return this.publishThroughCircuit(event);
    return inSpan(
      `publish ${event.subject}`,
      {
        kind: SpanKind.PRODUCER,
        attributes: {
          [MESSAGING.system]: 'nats',
          [MESSAGING.operationType]: 'send',
          [MESSAGING.destination]: event.subject,
          [MESSAGING.messageId]: event.messageId,
        },
      },
      async (span) => {
        const result = await this.publishThroughCircuit(event);
        span?.setAttributes({ 'messaging.nats.stream.sequence': result.seq, 'stayhub.events.duplicate': result.duplicate });
        return result;
      },
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    this.circuit.stop();
    const current = this.ready;
    this.ready = undefined;
    const c = await current?.catch(() => undefined);
    if (c) await closeNats(c.nc);
  }

  /** The connection, made on first use and again on the next use after it failed or closed. */
  private connection(): Promise<Connection> {
    if (this.closed) return Promise.reject(new Error('publisher closed'));
    this.ready ??= this.open().catch((err) => {
      this.ready = undefined; // try again on the next message
      throw err;
    });
    return this.ready;
  }

  /** Ensures (publisher role) the stream as this configuration declares it. */
  private declareStream(jsm: JetStreamManager) {
    return ensureStream(jsm, desiredStream(this.config), {
      role: this.role,
      log: this.log,
      allowShorterMaxAge: this.config.EVENTS_ALLOW_SHORTER_MAX_AGE,
    });
  }

  private async open(): Promise<Connection> {
    const { config, log } = this;
    const nc = await connectNats(this.url, this.options.connectionName ?? 'stayhub-relay');
    let jsm: JetStreamManager;
    try {
      jsm = await jetstreamManager(nc);
      const info = await this.declareStream(jsm);
      log.info(
        { stream: info.config.name, subjects: info.config.subjects, duplicateWindowSeconds: info.config.duplicate_window / 1e9 },
        'events stream ready',
      );
    } catch (err) {
      await nc.close().catch(() => undefined);
      throw err;
    }
    void nc.closed().then(() => {
      if (!this.closed) this.ready = undefined;
    });
    // The connection's own view of NATS opens and closes the circuit (src/events/circuit.ts).
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect') this.circuit.disconnected();
        else if (status.type === 'reconnect') this.circuit.reconnected();
      }
    })().catch(() => undefined);
    return {
      nc,
      js: jetstream(nc, { timeout: config.EVENTS_PUBLISH_TIMEOUT_MS }),
      jsm,
      // Asks after the stream when a publish found nobody: within the publish's own bound, because
      // a stream without a leader (a cluster's election) leaves the question unanswered.
      probe: await jetstreamManager(nc, { timeout: config.EVENTS_PUBLISH_TIMEOUT_MS, checkAPI: false }),
    };
  }

  /**
   * Brings the stream back after a publish to `subject` found none. One at a time: the publishes
   * in flight all fail together, and all wait for the one recreation.
   */
  private restoreStream(c: Connection, subject: string): Promise<void> {
    this.restoring ??= (async () => {
      const name = this.config.EVENTS_STREAM;
      const found = await this.findStream(c.probe, subject);
      const exists = found !== null;
      if (!exists) {
        this.log.error(
          { stream: name, subject },
          `events stream ${name} is gone (deleted while the relay runs); recreating it. Events it held that a consumer group had not read are lost to that group`,
        );
      } else if (holdsEvery(found.config.subjects, desiredStream(this.config).subjects!)) {
        // Its subjects are all there: nobody answered because the stream is between leaders (a
        // node lost, an election) or its leader has not caught up. Not an alarm; declared again
        // all the same, which costs one request and proves the stream takes our settings.
        this.log.warn(
          { stream: name, subject },
          `events stream ${name} holds ${subject} but took no publish: between leaders; declaring it again`,
        );
      } else {
        this.log.error({ stream: name, subject }, `events stream ${name} no longer holds ${subject}; bringing its subjects back`);
      }
      if (!exists) await sleep(DELETED_STREAM_SETTLE_MS);
      try {
        const info = await this.declareStream(c.jsm);
        if (exists) this.redeclaredAt = Date.now();
        this.log.warn(
          { stream: name, subjects: info.config.subjects, duplicateWindowSeconds: info.config.duplicate_window / 1e9 },
          'events stream ready again',
        );
      } catch (err) {
        // A cluster short of nodes for the replicas, or electing: away for now, not missing.
        if (jetStreamNotNow(err)) throw err;
        throw new EventsStreamMissingError(
          `stream ${name} is missing${exists ? ` the subject ${subject}` : ''} and could not be recreated: ${(err as Error).message}`,
          { cause: err },
        );
      }
    })().finally(() => {
      this.restoring = undefined;
    });
    return this.restoring;
  }

  /** The stream's info when it exists (it lost the subject, or its leader), null when deleted; JetStream silent is neither. */
  private async findStream(probe: JetStreamManager, subject: string): Promise<StreamInfo | null> {
    const name = this.config.EVENTS_STREAM;
    try {
      return await probe.streams.info(name);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) {
        // Only "not found" means deleted; silence is a stream between leaders, and passes.
        throw new EventsStreamUnavailableError(
          `no stream took the event on ${subject}, and JetStream at ${this.where} does not answer for stream ${name} ` +
            `either (${(err as Error).message}): its cluster may be electing a leader after losing a node, ` +
            `or JetStream is not ready (is it enabled on the server?). The event is retried`,
          { cause: err },
        );
      }
      return null;
    }
  }

  /**
   * The stream is declared again with our subject, and still nobody takes the publish: the stream
   * is there and has no leader. Away, not refused: seen in a chaos run on nats-server 2.9.10, a
   * stream recreated while one of its nodes was down and never caught up answered for its info and
   * its update but took no publish for 90 s; counted as refusals, 1,169 events spent all 12 of
   * their attempts on it and went DEAD. As away, they wait without spending attempts (the circuit).
   */
  private streamWithoutLeader(subject: string, cause: unknown): EventsStreamUnavailableError {
    return new EventsStreamUnavailableError(
      `stream ${this.config.EVENTS_STREAM} is declared with ${subject}, but nobody takes the event: the stream has no leader ` +
        `(its cluster electing one, or a node that has not caught up). The event is retried`,
      { cause },
    );
  }

  /** One publish: the event with its headers, awaiting the PubAck; a missing stream is brought back once. */
  private async publishOnce(event: OutgoingEvent): Promise<PublishResult> {
    const c = await this.connection();
    const h = eventHeaders(event);
    const send = () =>
      c.js.publish(event.subject, JSON.stringify(event.body), {
        msgID: event.messageId,
        headers: h,
        timeout: this.config.EVENTS_PUBLISH_TIMEOUT_MS,
      });
    let ack;
    try {
      ack = await send();
    } catch (err) {
      if (!nobodyAnswered(err)) throw err;
      // Found and declared again a moment ago, and still nobody: declaring it once more changes nothing.
      if (Date.now() - this.redeclaredAt < this.config.EVENTS_PUBLISH_TIMEOUT_MS) throw this.nobodyTakes(c, event.subject, err);
      await this.restoreStream(c, event.subject);
      try {
        ack = await send();
      } catch (again) {
        if (!nobodyAnswered(again)) throw again;
        throw this.nobodyTakes(c, event.subject, again);
      }
    }
    this.stuck.stored();
    return { seq: ack.seq, duplicate: ack.duplicate };
  }

  /** The stream is declared and nobody takes the publish: away for now, and past a bound its leader is asked to go. */
  private nobodyTakes(c: Connection, subject: string, cause: unknown): EventsStreamUnavailableError {
    if (this.stuck.nobodyTook(Date.now())) void this.askLeaderToStepDown(c);
    return this.streamWithoutLeader(subject, cause);
  }

  /** Asks the stream's leader to step down (src/events/stuck-leader.ts says when, and why). */
  private async askLeaderToStepDown(c: Connection): Promise<void> {
    const name = this.config.EVENTS_STREAM;
    const stuckSeconds = Math.round(this.stuck.stuckMs(Date.now()) / 1000);
    this.log.warn(
      { stream: name, stuckSeconds },
      `events stream ${name} has answered for itself and taken no publish for ${stuckSeconds} s: asking its leader to step down, so another node takes its publishes`,
    );
    const whyNot = await askStreamLeaderToStepDown(c.nc, name, this.config.EVENTS_PUBLISH_TIMEOUT_MS);
    if (whyNot)
      this.log.warn({ stream: name, whyNot }, 'the events stream leader did not step down; asked again later if nobody takes publishes');
    else this.log.info({ stream: name }, 'the events stream leader stepped down; another node is being elected');
  }

  /** A publish through the circuit (src/events/circuit.ts): NATS known to be away fails it at once. */
  private async publishThroughCircuit(event: OutgoingEvent): Promise<PublishResult> {
    const { circuit } = this;
    const t = circuit.enter();
    const work = this.publishOnce(event);
    // The circuit learns from every publish's own end, even one it let go before that end.
    work.then(
      () => circuit.answered(t),
      (err: unknown) => {
        if (refused(err)) circuit.answered(t);
        else if (!natsAway(err)) circuit.forget(t);
        else circuit.failed(t, (err as Error).message);
      },
    );
    try {
      return await circuit.unlessTripped(t, work);
    } catch (err) {
      if (err instanceof EventsUnavailableError || !natsAway(err)) throw err;
      throw new EventsUnavailableError(
        `NATS at ${this.where} did not take the event (${(err as Error).message}): the event waits in the outbox and is relayed once NATS answers`,
        circuit.awaySeconds(),
        { cause: err },
      );
    }
  }
}

function eventHeaders(event: OutgoingEvent): MsgHdrs {
  const h = natsHeaders();
  h.set(HEADERS.topic, event.topic);
  if (event.key !== null) h.set(HEADERS.key, event.key);
  h.set(HEADERS.outboxId, event.messageId);
  h.set(HEADERS.occurredAt, event.occurredAt.toISOString());
  h.set(HEADERS.schemaVersion, String(event.schemaVersion));
  // The publish span's context (tracing on): the consumer continues the trace from these headers.
  injectTraceContext(h, (carrier, key, value) => carrier.set(key, value));
  return h;
}

/**
 * The publisher of a command that publishes into the stream the worker keeps (events:backfill,
 * events:reconcile), ready; or, when it cannot be made ready, the exit code after one line on
 * `err` saying why: 2 for a stream whose settings this configuration refuses, 1 for NATS out of
 * reach. The caller closes a publisher it gets.
 */
export async function readyCommandPublisher(
  config: Config,
  logger: Logger,
  o: { command: string; connectionName: string; err: (line: string) => void },
): Promise<EventPublisher | number> {
  const publisher = createJetStreamPublisher(config, logger, {
    connectionName: o.connectionName,
    requireServerAtStart: true,
    ownsStream: false,
  });
  try {
    await publisher.prepare();
    return publisher;
  } catch (e) {
    await publisher.close();
    if (e instanceof StreamConfigError) {
      o.err(`${o.command}: ${e.message}`);
      return 2;
    }
    o.err(`${o.command}: ${describeNatsFailure(config.NATS_URL!, e)}`);
    return 1;
  }
}
