import { setTimeout as sleep } from 'node:timers/promises';
import { errors as natsErrors, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { injectTraceContext, inSpan, MESSAGING, SpanKind, tracingOn } from '../telemetry/tracing.ts';
import { jetstream, JetStreamApiError, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import { EventsUnavailableError, PublishCircuit } from './circuit.ts';
import { closeNats, connectNats, describeNats, describeNatsFailure } from './connection.ts';
import { DELETED_STREAM_SETTLE_MS, desiredStream, ensureStream, StreamConfigError } from './stream.ts';
import { HEADERS } from './subjects.ts';

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
 * A publish found no stream for its subject (the stream was deleted, or its subjects changed, while
 * the relay ran) and the stream could not be brought back. The message fails like any publish and
 * the outbox retries it; the message says what is missing and why it was not recreated.
 */
export class EventsStreamMissingError extends Error {
  readonly code = 'events_stream_missing';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EventsStreamMissingError';
  }
}

/**
 * A publish found nobody to take it and JetStream did not answer for the stream either, within the
 * publish timeout: in a cluster, the stream has no leader for a moment (its leader's node was lost
 * and the others are electing one; nobody listens on its subjects meanwhile), or JetStream is not
 * ready. Not a deleted stream: nothing is recreated. The message fails like a publish that timed
 * out, and the outbox retries it.
 */
export class EventsStreamUnavailableError extends Error {
  readonly code = 'events_stream_unavailable';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EventsStreamUnavailableError';
  }
}

/**
 * nats.js reports a publish nobody answered as JetStreamNotEnabled, "jetstream is not enabled".
 * On a server that stored our events a moment ago, what it means is that no stream holds the
 * subject any more: the cause is a "no responders" request error.
 */
function nobodyAnswered(err: unknown): boolean {
  const cause = (err as { cause?: unknown } | null)?.cause;
  return cause instanceof natsErrors.RequestError && cause.isNoResponders();
}

const STREAM_NOT_FOUND = 10059;

/** The failures that say NATS is away, not that it refused this event. */
const NATS_AWAY = [
  natsErrors.TimeoutError,
  natsErrors.ConnectionError,
  natsErrors.ClosedConnectionError,
  natsErrors.DrainingConnectionError,
];
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

function natsAway(err: unknown): boolean {
  if (err instanceof EventsUnavailableError) return true;
  // A cluster electing the stream's leader takes no publish for seconds: away, like a timeout.
  if (err instanceof EventsStreamUnavailableError) return true;
  if (NATS_AWAY.some((type) => err instanceof type)) return true;
  // A request error other than "no responders" (a missing stream: an answer, handled apart) is the connection's.
  if (err instanceof natsErrors.RequestError) return !err.isNoResponders();
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SOCKET_CODES.has(code);
}

/** The server answered, and refused: it is there; the event is the problem (the outbox retries it, an attempt). */
const refused = (err: unknown) =>
  err instanceof EventsStreamMissingError || err instanceof StreamConfigError || err instanceof JetStreamApiError;

/**
 * The JetStream publisher. The connection is made on first use and, when the server was
 * unreachable, on the next use again; after that the client reconnects by itself. Each publish is
 * a request that the server answers with a PubAck once the message is stored: many can be
 * outstanding on the one connection, so the worker's concurrent handlers make a pipeline.
 *
 * A publish that finds no stream for its subject brings the stream back (ensureStream, this
 * publisher's configuration) and is sent once more; when the stream cannot be brought back it
 * fails with EventsStreamMissingError, and the outbox retries it.
 */
export function createJetStreamPublisher(config: Config, logger: Logger, options: JetStreamPublisherOptions = {}): EventPublisher {
  const url = config.NATS_URL;
  if (!url) throw new Error('createJetStreamPublisher needs NATS_URL');
  const where = describeNats(url);
  const log = logger.child({ component: 'events-relay', nats: where });
  const role = options.ownsStream === false ? 'reader' : 'relay';
  let ready: Promise<{ nc: NatsConnection; js: JetStreamClient; jsm: JetStreamManager; probe: JetStreamManager }> | undefined;
  let restoring: Promise<void> | undefined;
  let closed = false;
  const circuit = new PublishCircuit(where, {
    stallMs: Math.min(config.EVENTS_STALL_MS, config.EVENTS_PUBLISH_TIMEOUT_MS / 2),
    onOpen: (why) => log.warn({ why }, 'NATS is not taking publishes: relayed events wait in the outbox until it answers'),
    onClose: (awayMs) => log.info({ awaySeconds: Math.round(awayMs / 1000) }, 'NATS answers again: relaying'),
  });

  const open = async () => {
    const nc = await connectNats(url, options.connectionName ?? 'stayhub-relay');
    let jsm: JetStreamManager;
    try {
      jsm = await jetstreamManager(nc);
      const info = await ensureStream(jsm, desiredStream(config), { role, log, allowShorterMaxAge: config.EVENTS_ALLOW_SHORTER_MAX_AGE });
      log.info(
        { stream: info.config.name, subjects: info.config.subjects, duplicateWindowSeconds: info.config.duplicate_window / 1e9 },
        'events stream ready',
      );
    } catch (err) {
      await nc.close().catch(() => undefined);
      throw err;
    }
    void nc.closed().then(() => {
      if (!closed) ready = undefined;
    });
    // The connection's own view of NATS opens and closes the circuit (src/events/circuit.ts).
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect') circuit.disconnected();
        else if (status.type === 'reconnect') circuit.reconnected();
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
  };
  const connection = () => {
    if (closed) return Promise.reject(new Error('publisher closed'));
    ready ??= open().catch((err) => {
      ready = undefined; // try again on the next message
      throw err;
    });
    return ready;
  };

  /**
   * Brings the stream back after a publish to `subject` found none. One at a time: the publishes
   * in flight all fail together, and all wait for the one recreation.
   */
  const restoreStream = (jsm: JetStreamManager, probe: JetStreamManager, subject: string) => {
    restoring ??= (async () => {
      const name = config.EVENTS_STREAM;
      let exists = true;
      try {
        await probe.streams.info(name);
      } catch (err) {
        if (!(err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND)) {
          // Only "not found" means deleted; silence is a stream between leaders, and passes.
          throw new EventsStreamUnavailableError(
            `no stream took the event on ${subject}, and JetStream at ${where} does not answer for stream ${name} ` +
              `either (${(err as Error).message}): its cluster may be electing a leader after losing a node, ` +
              `or JetStream is not ready (is it enabled on the server?). The event is retried`,
            { cause: err },
          );
        }
        exists = false;
      }
      log.error(
        { stream: name, subject },
        exists
          ? `events stream ${name} no longer holds ${subject}; bringing its subjects back`
          : `events stream ${name} is gone (deleted while the relay runs); recreating it. Events it held that a consumer group had not read are lost to that group`,
      );
      if (!exists) await sleep(DELETED_STREAM_SETTLE_MS);
      try {
        const info = await ensureStream(jsm, desiredStream(config), { role, log, allowShorterMaxAge: config.EVENTS_ALLOW_SHORTER_MAX_AGE });
        log.warn(
          { stream: name, subjects: info.config.subjects, duplicateWindowSeconds: info.config.duplicate_window / 1e9 },
          'events stream ready again',
        );
      } catch (err) {
        throw new EventsStreamMissingError(
          `stream ${name} is missing${exists ? ` the subject ${subject}` : ''} and could not be recreated: ${(err as Error).message}`,
          { cause: err },
        );
      }
    })().finally(() => {
      restoring = undefined;
    });
    return restoring;
  };

  /** One publish: the event with its headers, awaiting the PubAck; a missing stream is brought back once. */
  const publishOnce = async (event: OutgoingEvent): Promise<PublishResult> => {
    const { js, jsm, probe } = await connection();
    const h = natsHeaders();
    h.set(HEADERS.topic, event.topic);
    if (event.key !== null) h.set(HEADERS.key, event.key);
    h.set(HEADERS.outboxId, event.messageId);
    h.set(HEADERS.occurredAt, event.occurredAt.toISOString());
    h.set(HEADERS.schemaVersion, String(event.schemaVersion));
    // The publish span's context (tracing on): the consumer continues the trace from these headers.
    injectTraceContext(h, (carrier, key, value) => carrier.set(key, value));
    const send = () =>
      js.publish(event.subject, JSON.stringify(event.body), {
        msgID: event.messageId,
        headers: h,
        timeout: config.EVENTS_PUBLISH_TIMEOUT_MS,
      });
    let ack;
    try {
      ack = await send();
    } catch (err) {
      if (!nobodyAnswered(err)) throw err;
      await restoreStream(jsm, probe, event.subject);
      try {
        ack = await send();
      } catch (again) {
        if (!nobodyAnswered(again)) throw again;
        throw new EventsStreamMissingError(`stream ${config.EVENTS_STREAM} is back but no stream takes ${event.subject}`, {
          cause: again,
        });
      }
    }
    return { seq: ack.seq, duplicate: ack.duplicate };
  };

  /** A publish through the circuit (src/events/circuit.ts): NATS known to be away fails it at once. */
  const publishThroughCircuit = async (event: OutgoingEvent): Promise<PublishResult> => {
    const t = circuit.enter();
    const work = publishOnce(event);
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
        `NATS at ${where} did not take the event (${(err as Error).message}): the event waits in the outbox and is relayed once NATS answers`,
        circuit.awaySeconds(),
        { cause: err },
      );
    }
  };

  return {
    async prepare() {
      try {
        await connection();
      } catch (err) {
        if (err instanceof StreamConfigError || options.requireServerAtStart) throw err;
        // Unreachable at start is not fatal: messages wait and retry until the server is up.
        log.warn({ err: err }, 'NATS unreachable at start; relayed messages will retry');
      }
    },
    publish(event) {
      if (!tracingOn()) return publishThroughCircuit(event);
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
          const result = await publishThroughCircuit(event);
          span?.setAttributes({ 'messaging.nats.stream.sequence': result.seq, 'stayhub.events.duplicate': result.duplicate });
          return result;
        },
      );
    },
    async close() {
      closed = true;
      circuit.stop();
      const current = ready;
      ready = undefined;
      const c = await current?.catch(() => undefined);
      if (c) await closeNats(c.nc);
    },
  };
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
