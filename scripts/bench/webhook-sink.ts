import { onParentGone } from '../../src/process/lifeline.ts';
import { startWebhookReceiver } from '../lib/webhook-receiver.ts';

/*
 * The webhooks throughput's receiver, in a process of its own: the shared receiver
 * (scripts/lib/webhook-receiver.ts) answering 204 to every request, keeping no bodies. A receiver
 * is never in the sender's process in production; in the bench's process it shared the event loop
 * whose deliveries/s the figure is about (docs/performance.md, "The receiver in a process of its own").
 * Prints `listening <port>` when ready, and when stopped (SIGTERM) `connections <n>` and
 * `cpu <µs>`: the CPU time it used from its first request on (its start-up left out).
 */
let cpuAtFirst: NodeJS.CpuUsage | undefined;
const receiver = await startWebhookReceiver(
  () => {
    cpuAtFirst ??= process.cpuUsage();
    return { status: 204 };
  },
  { record: false },
);
console.log(`listening ${new URL(receiver.origin).port}`);

const stop = () => {
  const cpu = cpuAtFirst ? process.cpuUsage(cpuAtFirst) : { user: 0, system: 0 };
  console.log(`connections ${receiver.connections()}`);
  console.log(`cpu ${cpu.user + cpu.system}`);
  void receiver.close().then(() => process.exit(0));
};
process.once('SIGTERM', stop);
onParentGone(stop, { name: 'bench-webhook-sink' });
