// graphile-worker as its authors tune it for throughput: the settings of graphile/worker's own
// perfTest/graphile.config.js (24 concurrent jobs, a pool of 25, a local queue of 500 with a
// 10 ms refetch delay, and batched completion). The one source of these settings for both ways
// graphile-worker runs in the bench: the CLI (`graphile-worker --config` this file, as
// perfTest/run.js runs it) and in-process `run({ preset, taskList })` (scripts/bench/peers/graphile.ts).
//
// BENCH_GRAPHILE_TRACE=FILE (set by the burst section when BENCH_BURST_TRACE=1): every local-queue
// fetch, refetch delay, LISTEN notification and job error is appended to FILE with its wall-clock
// time, to look into a slow burst (graphile-trace-events.cjs).
const path = require('node:path');
const { traceEvents } = require('./graphile-trace-events.cjs');

const trace = process.env.BENCH_GRAPHILE_TRACE;

module.exports = {
  worker: {
    connectionString: process.env.DATABASE_URL,
    taskDirectory: path.join(__dirname, 'graphile-tasks'),
    fileExtensions: ['.js', '.cjs', '.mjs'],
    gracefulShutdownAbortTimeout: 2500,
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
    ...(trace ? { events: traceEvents(trace) } : {}),
  },
};
