import { setTimeout as sleep } from 'node:timers/promises';
import { connect, errors as natsErrors, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiError } from '@nats-io/jetstream';
import type { Logger } from '../logger.ts';
import { describeNatsServers, parseNatsServers } from './nats-url.ts';

/*
 * NATS_URL: one server, or a cluster's servers separated by commas (src/events/nats-url.ts parses
 * it; src/config.ts refuses a bad one at start). The client is given every server: it connects to
 * one of them, moves to another when that one goes away, and learns any others from the cluster.
 *
 * tls:// requires TLS: a server that does not offer it is refused, rather than the client falling
 * back to plain text with the password on the wire. nats:// connects as the server asks (a server
 * that requires TLS still gets it). The server's certificate is checked against the system's CAs
 * and NODE_EXTRA_CA_CERTS (a private CA's PEM file, read by Node at start).
 */

/** host:port of each server of a NATS_URL, without credentials, for logs and errors. */
export function describeNats(url: string): string {
  return describeNatsServers(url);
}

/** The client options a NATS_URL stands for (connectNats adds the reconnect policy). */
export function natsConnectionOptions(url: string): Pick<ConnectionOptions, 'servers' | 'user' | 'pass' | 'tls'> {
  const parsed = parseNatsServers(url);
  return {
    servers: parsed.servers,
    user: parsed.user,
    pass: parsed.pass,
    // An object, even empty, makes the client refuse a server without TLS; undefined lets it choose.
    ...(parsed.tls ? { tls: {} } : {}),
  };
}

/**
 * Why a process could not start on NATS, in words a person can act on. A server running without
 * JetStream (Debian's nats-server service, as installed, is one) accepts the connection, then
 * leaves JetStream's API requests without responders.
 */
export function describeNatsFailure(url: string, err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  if (/jetstream is not enabled/i.test(message) || (/no responders/i.test(message) && message.includes('$JS.API'))) {
    return `the NATS server at ${describeNats(url)} does not run JetStream: start it with -js (nats-server -js -sd DIR)`;
  }
  return `cannot reach NATS at ${describeNats(url)}: ${message}`;
}

/**
 * One connection per process. Once connected it reconnects forever, every half second: a NATS
 * restart is an outage to wait out, not a reason to exit (publishes made meanwhile time out and
 * their outbox messages retry; consumers simply pull again). The first connection is not retried
 * here: the caller decides (the relay retries on the next message, a consumer exits).
 */
export async function connectNats(url: string, name: string): Promise<NatsConnection> {
  return connect({
    ...natsConnectionOptions(url),
    name,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    timeout: 3000,
    // Without it, every request (each relay publish awaits its PubAck as one) builds two Error
    // objects up front, stack traces and all, in case it fails: 7 % of the relay's CPU in the
    // bench's profile. A failed publish still says what failed; our handler adds which message.
    noAsyncTraces: true,
  });
}

/**
 * Ends a connection for good: drain (publishes already written get their acks, messages already
 * delivered their handling), then close. On a connection that lost its server, drain fails at
 * once and leaves the client reconnecting forever, every half second: that timer alone kept a
 * stopped worker and consumer alive after their work was done. close() ends the reconnect loop
 * whatever drain did.
 */
export async function closeNats(nc: NatsConnection): Promise<void> {
  await nc.drain().catch(() => undefined);
  if (!nc.isClosed()) await nc.close().catch(() => undefined);
}

/**
 * How long a process starting against NATS waits for JetStream to answer before giving up. A
 * cluster that lost a node, or was restarted whole, elects its leaders (the cluster's, then each
 * stream's and consumer's) in seconds; its API requests meanwhile time out. A minute without an
 * answer is an outage, not an election.
 */
export const JETSTREAM_ELECTION_WAIT_MS = 60_000;

/** "no suitable peers for placement": fewer JetStream nodes up than the stream's replicas. */
export const NO_SUITABLE_PEERS = 10005;

/**
 * Whether JetStream answered "not now": 503 / "JetStream cluster not available" (10008) while the
 * cluster has no leader, or "no suitable peers for placement" (10005) while fewer of its nodes are
 * up than the stream has replicas (one restarting, or not yet known to the leader after a start).
 * Not a refusal of what was asked: the same request can succeed once the cluster is whole. (A
 * cluster smaller than EVENTS_REPLICAS answers 10005 for ever: the log says so and names it.)
 */
export function jetStreamNotNow(err: unknown): boolean {
  return err instanceof JetStreamApiError && (err.status === 503 || err.code === 10008 || err.code === NO_SUITABLE_PEERS);
}

/**
 * Whether `err` is JetStream not answering for now: a request that timed out (nobody leads what it
 * asks about yet), or JetStream's "not now" (jetStreamNotNow). Trying again can succeed.
 */
export function jetStreamElecting(err: unknown): boolean {
  if (err instanceof natsErrors.TimeoutError) return true;
  if (jetStreamNotNow(err)) return true;
  return err instanceof Error && /^timeout$/i.test(err.message);
}

/**
 * Runs one idempotent JetStream step (create the stream if missing, read a consumer, …), again
 * every half second while JetStream is not answering (jetStreamElecting), for up to `withinMs`;
 * then, or on any other error, throws as the step did. Says once in the log that it waits.
 */
export async function onceJetStreamAnswers<T>(
  what: string,
  step: () => Promise<T>,
  o: { log?: Logger; withinMs?: number } = {},
): Promise<T> {
  const until = Date.now() + (o.withinMs ?? JETSTREAM_ELECTION_WAIT_MS);
  for (let said = false; ; said = true) {
    try {
      return await step();
    } catch (err) {
      if (!jetStreamElecting(err) || Date.now() > until) throw err;
      if (!said) o.log?.warn({ err, step: what }, 'JetStream is not answering yet (a cluster electing its leaders?): waiting for it');
      await sleep(500);
    }
  }
}
