import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/*
 * The one Prometheus endpoint of the processes that are not the API (the worker, the earnings
 * consumer): GET /metrics and nothing else, on a server of its own, so a scrape never waits for
 * the process's work and holds no database connection but what a collector asks for.
 */

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

export interface MetricsServerOptions {
  /**
   * Let the process exit while the server listens: for a process that lives as long as its work,
   * not its metrics (a consumer group that ends with an error must exit with it even if nobody
   * closes this server).
   */
  unref?: boolean;
}

/** Serves `registry` on `port` (0: any free port) of `host`; rejects if it cannot listen. */
export async function serveMetrics(
  registry: Registry,
  port: number,
  host: string,
  opts: MetricsServerOptions = {},
): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    // A collector that throws fails this scrape only; Prometheus records the target as down.
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: unknown) => res.writeHead(503, { 'content-type': 'text/plain' }).end(`metrics unavailable: ${(err as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  if (opts.unref) server.unref();
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
