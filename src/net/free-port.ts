import { readFileSync } from 'node:fs';
import net from 'node:net';

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, for a server this process is about to start
 * (a throw-away PostgreSQL, a NATS node, an API under test). Every caller starts its server at
 * once, and on a collision the start fails loudly rather than silently.
 *
 * Taken below the kernel's ephemeral range (ip_local_port_range), not with listen(0): a port from
 * that range is also what every outgoing connection is given as its local port, so one handed out
 * here could be taken by any client's connection before the server bound it (a NATS node's route
 * port, seen "address already in use" with the test suite's connections around it). Below the
 * range only servers that chose their port take ports, and this one checks it can listen first.
 * No two calls in one process hand out the same port.
 */
export async function freePort(): Promise<number> {
  const range = BELOW_EPHEMERAL;
  for (let tries = 0; range && tries < 100; tries++) {
    const port = range.lo + Math.floor(Math.random() * (range.hi - range.lo + 1));
    if (handedOut.has(port)) continue;
    if ((await listenOnce(port)) !== undefined) {
      handedOut.add(port);
      return port;
    }
  }
  // No such range here (not Linux, or a range starting low): the kernel's choice.
  const port = await listenOnce(0);
  if (port === undefined) throw new Error('no free TCP port on 127.0.0.1');
  return port;
}

const handedOut = new Set<number>();

/** Ports from 10000 to just below the ephemeral range, when the kernel says where that starts. */
const BELOW_EPHEMERAL = ((): { lo: number; hi: number } | undefined => {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return first > 11_000 ? { lo: 10_000, hi: first - 1 } : undefined;
  } catch {
    return undefined;
  }
})();

/** Listens on `port` (0: the kernel picks) and closes again; the port, or undefined when it is taken. */
function listenOnce(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(undefined));
    srv.listen(port, '127.0.0.1', () => {
      const { port: bound } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(bound));
    });
  });
}
