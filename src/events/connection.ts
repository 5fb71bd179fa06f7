import { connect, type NatsConnection } from '@nats-io/transport-node';

/** host:port of a NATS URL without credentials, for logs and errors. */
export function describeNats(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 4222}`;
  } catch {
    return '(unparseable NATS_URL)';
  }
}

/**
 * One connection per process. Once connected it reconnects forever, every half second: a NATS
 * restart is an outage to wait out, not a reason to exit (publishes made meanwhile time out and
 * their outbox messages retry; consumers simply pull again). The first connection is not retried
 * here: the caller decides (the relay retries on the next message, a consumer exits).
 */
export async function connectNats(url: string, name: string): Promise<NatsConnection> {
  const u = new URL(url);
  return connect({
    servers: `${u.hostname}:${u.port || 4222}`,
    user: u.username ? decodeURIComponent(u.username) : undefined,
    pass: u.password ? decodeURIComponent(u.password) : undefined,
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
