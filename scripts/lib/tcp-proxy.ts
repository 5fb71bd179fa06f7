import net from 'node:net';
import { Transform, type Readable } from 'node:stream';
import { freePort } from './processes.ts';

/*
 * A TCP proxy in front of a server (PostgreSQL, NATS), for what only the network between a client
 * and its server can do: look like something other than the server (a plain load balancer), answer
 * late, or go away. One upstream connection per client, bytes passed as they are, an end of
 * stream or a reset on one side passed to the other.
 */

export interface TcpProxyOptions {
  /**
   * Holds every chunk the server sends this long before passing it on (default 0: at once). Each
   * chunk waits on its own, so requests pipelined by a client share the wait rather than add up.
   */
  replyDelayMs?: number;
}

export interface TcpProxy {
  /** The target's URL with 127.0.0.1 and the proxy's port in place of its host and port. */
  url: string;
  /** Connections refused while down. */
  refused(): number;
  /**
   * Down: cuts every connection it holds and every new one at once, as a server that restarts
   * looks from its clients' side. Up again: forwards new connections.
   */
  setDown(down: boolean): void;
  /** Cuts every connection and stops listening. */
  close(): Promise<void>;
}

/** A stage that passes each chunk on `ms` later; its end waits for the last one. */
function delayed(ms: number): Transform {
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      setTimeout(() => this.push(chunk), ms);
      done();
    },
    flush(done) {
      // Timers of one delay fire in the order they were set: this one after the last chunk's.
      setTimeout(() => done(), ms);
    },
  });
}

/** Forwards to the host and port of `target` (postgres://…, nats://…). */
export async function startTcpProxy(target: string, opts: TcpProxyOptions = {}): Promise<TcpProxy> {
  const to = new URL(target);
  const sockets = new Set<net.Socket>();
  let down = false;
  let refused = 0;
  const server = net.createServer((client) => {
    if (down) {
      refused++;
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(to.port), to.hostname);
    const reset = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', reset);
      s.on('close', () => sockets.delete(s));
    }
    const replies: Readable = opts.replyDelayMs ? upstream.pipe(delayed(opts.replyDelayMs)) : upstream;
    client.pipe(upstream);
    replies.pipe(client);
  });
  // A port below the ephemeral range (src/net/free-port.ts): no client's connection holds it first.
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    refused: () => refused,
    setDown(value) {
      down = value;
      if (down) for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
