import { main } from '../../src/commands/drain-outbox.ts';
import type { Handler } from '../../src/outbox/index.ts';
import { firstJobMarker } from './lib/marks.ts';

/**
 * `node --import tsx scripts/bench/bench-worker.ts --until-empty`: our real worker entry point
 * (src/commands/drain-outbox.ts `main`, its flags, config and loop) with two benchmark handlers
 * added to the production list, for topics no producer writes:
 *
 *   bench.noop   returns at once: the drain measures the queue's own overhead
 *   bench.sleep  waits BENCH_SLEEP_MS (20 ms): a handler bound by I/O, like an email provider
 *   bench.fanout BENCH_FANOUT_HANDLERS (3) handlers that return at once: one row carrying several
 *                subscriptions, as booking.created does (the fanout section)
 *
 * Topics outside src/messages/topics.ts have no payload schema, so no validation runs for them,
 * as for the peers' jobs.
 */
const sleepMs = Number(process.env.BENCH_SLEEP_MS ?? 20);
const fanoutHandlers = Number(process.env.BENCH_FANOUT_HANDLERS ?? 3);
// Records when this process entered its first handler (scripts/bench/lib/marks.ts).
const mark = firstJobMarker(process.env.BENCH_MARK_DIR);

const benchHandlers = (): Handler<any>[] => [
  { name: 'bench-noop', topic: 'bench.noop' as never, handle: async () => mark() },
  {
    name: 'bench-sleep',
    topic: 'bench.sleep' as never,
    handle: ({ signal }) =>
      new Promise<void>((resolve, reject) => {
        mark();
        const t = setTimeout(resolve, sleepMs);
        signal.addEventListener('abort', () => {
          clearTimeout(t);
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the abort's own reason, passed on as Node's APIs do
          reject(signal.reason);
        });
      }),
  },
  ...Array.from({ length: fanoutHandlers }, (_, i) => ({
    name: `bench-fanout-${i + 1}`,
    topic: 'bench.fanout' as never,
    handle: async () => mark(),
  })),
];

main({ argv: process.argv.slice(2), extraHandlers: benchHandlers }).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`bench-worker: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
