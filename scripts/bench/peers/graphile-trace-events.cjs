// graphile-worker's own events, written to a file with their wall-clock time (performance.timeOrigin
// + now, the clock of scripts/bench/lib/marks.ts): what its local queue fetched and when, the
// LISTEN notifications it got, refetch delays, errors. For the CLI through graphile.config.cjs
// (BENCH_GRAPHILE_TRACE), for in-process run() through scripts/bench/peers/graphile.ts; the burst
// section prints a summary of it relative to the burst's COMMIT (BENCH_BURST_TRACE=1).
const { appendFileSync } = require('node:fs');
const { EventEmitter } = require('node:events');

/** An EventEmitter for graphile-worker's `events` option that writes the events above to `file`. */
function traceEvents(file) {
  const events = new EventEmitter();
  const write = (what) => appendFileSync(file, `${(performance.timeOrigin + performance.now()).toFixed(1)} ${process.pid} ${what}\n`);
  events.on('pool:listen:notification', (e) => write(`notification ${e.message.channel} ${e.message.payload}`));
  events.on('localQueue:getJobs:complete', (e) => write(`fetched ${e.jobs.length}`));
  events.on('localQueue:refetchDelay:start', (e) =>
    write(`refetch-delay ${Math.round(e.delayMs)} ms, abort after ${Math.round(e.abortThreshold)}`),
  );
  events.on('localQueue:refetchDelay:abort', () => write('refetch-delay aborted'));
  events.on('localQueue:returnJobs', (e) => write(`returned ${e.jobs.length}`));
  events.on('pool:listen:error', (e) => write(`listen error ${e.error && e.error.message}`));
  events.on('job:error', (e) => write(`job error ${e.error && e.error.message}`));
  events.on('resetLocked:started', () => write('reset-locked'));
  return events;
}

module.exports = { traceEvents };
