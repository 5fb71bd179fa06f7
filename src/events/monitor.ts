import { JetStreamApiCodes, JetStreamApiError, JetStreamError, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { errors as natsErrors, type NatsConnection } from '@nats-io/transport-node';
import { connectNats, describeNats } from './connection.ts';
import { EventsUnavailableError } from './errors.ts';
import { readStreamLag, type GroupLag } from './lag.ts';

/*
 * The API process's read-only view of the events stream: its size and every consumer group's lag,
 * for the admin dashboard (GET /admin/events/groups). The worker and the consumers have their own
 * connections; this one is the API's, opened on the first read (an API that nobody asks about
 * consumer groups never connects) and kept for the next ones.
 */

export interface StreamGroups {
  /**
   * `exists` is false before the worker has created the stream (it does so when it starts).
   * `firstSeq` and `firstAt`: the first event it still holds (0 and null when it holds none).
   */
  stream: { name: string; exists: boolean; messages: number; firstSeq: number; firstAt: Date | null };
  groups: GroupLag[];
}

export interface EventsMonitor {
  /** Resolves within `timeoutMs` or rejects with EventsUnavailableError; never waits longer. */
  read(): Promise<StreamGroups>;
  close(): Promise<void>;
}

export interface EventsMonitorOptions {
  url: string;
  stream: string;
  /** The bound on one read, connecting included. */
  timeoutMs: number;
  /** Tests count connections through it. */
  connect?: (url: string, name: string) => Promise<NatsConnection>;
}

const NATS_ERRORS: (abstract new (...args: never[]) => Error)[] = [...Object.values(natsErrors), JetStreamError, JetStreamApiError];

/** An error from NATS or JetStream (refused, timeout, no responders, an API error): not a bug of ours. */
const fromNats = (err: unknown) => NATS_ERRORS.some((type) => err instanceof type);

export function createEventsMonitor(o: EventsMonitorOptions): EventsMonitor {
  const connect = o.connect ?? connectNats;
  const where = describeNats(o.url);
  let current: Promise<{ nc: NatsConnection; jsm: JetStreamManager }> | undefined;
  let closed = false;

  const open = async () => {
    const nc = await connect(o.url, 'stayhub-api-events');
    if (closed) {
      // close() ran while this connection was being made: nobody will close it later.
      await nc.close().catch(() => undefined);
      throw new EventsUnavailableError('the events monitor is closed');
    }
    // Every JetStream request is bounded too. checkAPI off: no account round trip before the
    // first read; the read itself tells whether JetStream answers.
    return { nc, jsm: await jetstreamManager(nc, { timeout: o.timeoutMs, checkAPI: false }) };
  };

  /**
   * One connection, made on first use. A failed attempt is forgotten so the next read tries again;
   * a connection that ended for good likewise. Once connected, the client reconnects by itself
   * (src/events/connection.ts): reads made during an outage time out and the next ones succeed.
   */
  const connection = () => {
    if (closed) return Promise.reject(new EventsUnavailableError('the events monitor is closed'));
    if (!current) {
      const opening = open();
      current = opening;
      const forget = () => {
        if (current === opening) current = undefined;
      };
      opening.then(({ nc }) => void nc.closed().then(forget), forget);
    }
    return current;
  };

  const readOnce = async (): Promise<StreamGroups> => {
    const { jsm } = await connection();
    try {
      const lag = await readStreamLag(jsm, o.stream);
      const { firstSeq, firstAt } = lag.holdings;
      return { stream: { name: o.stream, exists: true, messages: lag.messages, firstSeq, firstAt }, groups: lag.groups };
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) {
        return { stream: { name: o.stream, exists: false, messages: 0, firstSeq: 0, firstAt: null }, groups: [] };
      }
      throw err;
    }
  };

  return {
    async read() {
      const work = readOnce();
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new EventsUnavailableError(`NATS at ${where} did not answer within ${o.timeoutMs} ms`)),
          o.timeoutMs,
        );
      });
      try {
        return await Promise.race([work, deadline]);
      } catch (err) {
        if (err instanceof EventsUnavailableError) throw err;
        if (fromNats(err)) throw new EventsUnavailableError(`NATS at ${where}: ${(err as Error).message}`, 0, { cause: err });
        throw err;
      } finally {
        clearTimeout(timer);
        // A read that lost the race still settles later, unobserved.
        work.catch(() => undefined);
      }
    },
    async close() {
      closed = true;
      const c = await current?.catch(() => undefined);
      current = undefined;
      await c?.nc.close().catch(() => undefined);
    },
  };
}
