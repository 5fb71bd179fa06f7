import { connect, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';

/*
 * NATS_URL: nats://[user:password@]host[:port] or tls://[user:password@]host[:port].
 *
 * The user and password (percent-encoded in the URL when they hold reserved characters) are sent
 * to the server; they never appear in a log line or an error message of ours (describeNats).
 * tls:// requires TLS: a server that does not offer it is refused, rather than the client falling
 * back to plain text with the password on the wire. nats:// connects as the server asks (a server
 * that requires TLS still gets it). The server's certificate is checked against the system's CAs
 * and NODE_EXTRA_CA_CERTS (a private CA's PEM file, read by Node at start).
 */

const SCHEMES: Readonly<Record<string, { tls: boolean }>> = { 'nats:': { tls: false }, 'tls:': { tls: true } };

/** host:port of a NATS URL without credentials, for logs and errors. */
export function describeNats(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 4222}`;
  } catch {
    return '(unparseable NATS_URL)';
  }
}

/** The client options a NATS_URL stands for (connectNats adds the reconnect policy). */
export function natsConnectionOptions(url: string): Pick<ConnectionOptions, 'servers' | 'user' | 'pass' | 'tls'> {
  const u = new URL(url);
  const scheme = SCHEMES[u.protocol];
  if (!scheme) throw new Error(`NATS_URL must start with nats:// or tls:// (it starts with ${u.protocol}//)`);
  return {
    servers: `${u.hostname}:${u.port || 4222}`,
    user: u.username ? decodeURIComponent(u.username) : undefined,
    pass: u.password ? decodeURIComponent(u.password) : undefined,
    // An object, even empty, makes the client refuse a server without TLS; undefined lets it choose.
    ...(scheme.tls ? { tls: {} } : {}),
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
