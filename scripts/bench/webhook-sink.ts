import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { onParentGone } from '../../src/process/lifeline.ts';

/*
 * The webhooks throughput's receiver, in a process of its own: it answers 204 to every request
 * and counts connections. A receiver is never in the sender's process in production; in the
 * bench's process it shared the event loop whose deliveries/s the figure is about
 * (docs/performance.md, "The receiver in a process of its own").
 * Prints `listening <port>` when ready, and when stopped (SIGTERM) `connections <n>` and
 * `cpu <µs>`: the CPU time it used from its first request on (its start-up left out).
 */
let connections = 0;
let cpuAtFirst: NodeJS.CpuUsage | undefined;
const server = http.createServer((req, res) => {
  cpuAtFirst ??= process.cpuUsage();
  req.resume();
  req.on('end', () => res.writeHead(204).end());
});
server.on('connection', () => void connections++);
server.listen(0, '127.0.0.1', () => console.log(`listening ${(server.address() as AddressInfo).port}`));

const stop = () => {
  const cpu = cpuAtFirst ? process.cpuUsage(cpuAtFirst) : { user: 0, system: 0 };
  console.log(`connections ${connections}`);
  console.log(`cpu ${cpu.user + cpu.system}`);
  server.closeAllConnections();
  server.close(() => process.exit(0));
};
process.once('SIGTERM', stop);
onParentGone(stop, { name: 'bench-webhook-sink' });
