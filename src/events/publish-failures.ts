import { errors as natsErrors } from '@nats-io/transport-node';
import { JetStreamApiError } from '@nats-io/jetstream';
import { EventsUnavailableError } from './errors.ts';
import { StreamConfigError } from './stream.ts';
import { jetStreamNotNow } from './connection.ts';

/*
 * What a failed publish means to the relay's circuit (src/events/circuit.ts): NATS away (the
 * circuit counts it), the server's refusal of this event (the server is there), or no stream for
 * the subject (src/events/publisher.ts brings the stream back).
 */

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
 * publish timeout, or answered and was declared again and still nobody took it: in a cluster, the
 * stream has no leader (its leader's node was lost and the others are electing one, or a node
 * that never caught up holds up its group; nobody listens on its subjects meanwhile), or JetStream
 * is not ready. Not a deleted stream: nothing is recreated. NATS away for now: the message waits
 * without spending an attempt, as for a publish that timed out.
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
export function nobodyAnswered(err: unknown): boolean {
  const cause = (err as { cause?: unknown } | null)?.cause;
  return cause instanceof natsErrors.RequestError && cause.isNoResponders();
}

/** The failures that say NATS is away, not that it refused this event. */
const NATS_AWAY = [
  natsErrors.TimeoutError,
  natsErrors.ConnectionError,
  natsErrors.ClosedConnectionError,
  natsErrors.DrainingConnectionError,
];
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

export function natsAway(err: unknown): boolean {
  if (err instanceof EventsUnavailableError) return true;
  // JetStream's "not now" (an election, too few nodes for the replicas) says nothing about this event.
  if (jetStreamNotNow(err)) return true;
  // A cluster electing the stream's leader takes no publish for seconds: away, like a timeout.
  if (err instanceof EventsStreamUnavailableError) return true;
  if (NATS_AWAY.some((type) => err instanceof type)) return true;
  // A request error other than "no responders" (a missing stream: an answer, handled apart) is the connection's.
  if (err instanceof natsErrors.RequestError) return !err.isNoResponders();
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SOCKET_CODES.has(code);
}

/** The server answered, and refused: it is there; the event is the problem (the outbox retries it, an attempt). */
export const refused = (err: unknown) =>
  err instanceof EventsStreamMissingError ||
  err instanceof StreamConfigError ||
  (err instanceof JetStreamApiError && !jetStreamNotNow(err));
