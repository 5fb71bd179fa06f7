import net from 'node:net';

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, for a server this process is about to start
 * (a throw-away PostgreSQL, an API under test). Another process could take it in between; every
 * caller starts its server at once, and on a collision the start fails loudly rather than silently.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
