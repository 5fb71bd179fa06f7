import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import { connectNats, describeNats } from './connection.ts';
import { desiredStream, ensureStream, StreamConfigError } from './stream.ts';
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
 * The JetStream publisher. The connection is made on first use and, when the server was
 * unreachable, on the next use again; after that the client reconnects by itself. Each publish is
 * a request that the server answers with a PubAck once the message is stored: many can be
 * outstanding on the one connection, so the worker's concurrent handlers make a pipeline.
 */
export function createJetStreamPublisher(config: Config, logger: Logger, options: JetStreamPublisherOptions = {}): EventPublisher {
  const url = config.NATS_URL;
  if (!url) throw new Error('createJetStreamPublisher needs NATS_URL');
  const log = logger.child({ component: 'events-relay', nats: describeNats(url) });
  let ready: Promise<{ nc: NatsConnection; js: JetStreamClient }> | undefined;
  let closed = false;

  const open = async () => {
    const nc = await connectNats(url, options.connectionName ?? 'stayhub-relay');
    try {
      const info = await ensureStream(await jetstreamManager(nc), desiredStream(config), { role: options.ownsStream === false ? 'reader' : 'relay', log });
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
    return { nc, js: jetstream(nc, { timeout: config.EVENTS_PUBLISH_TIMEOUT_MS }) };
  };
  const connection = () => {
    if (closed) return Promise.reject(new Error('publisher closed'));
    ready ??= open().catch((err) => {
      ready = undefined; // try again on the next message
      throw err;
    });
    return ready;
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
    async publish(event) {
      const { js } = await connection();
      const h = natsHeaders();
      h.set(HEADERS.topic, event.topic);
      if (event.key !== null) h.set(HEADERS.key, event.key);
      h.set(HEADERS.outboxId, event.messageId);
      h.set(HEADERS.occurredAt, event.occurredAt.toISOString());
      h.set(HEADERS.schemaVersion, String(event.schemaVersion));
      const ack = await js.publish(event.subject, JSON.stringify(event.body), {
        msgID: event.messageId,
        headers: h,
        timeout: config.EVENTS_PUBLISH_TIMEOUT_MS,
      });
      return { seq: ack.seq, duplicate: ack.duplicate };
    },
    async close() {
      closed = true;
      const current = ready;
      ready = undefined;
      const c = await current?.catch(() => undefined);
      // drain: publishes already written get their acks before the socket closes.
      await c?.nc.drain().catch(() => undefined);
    },
  };
}
