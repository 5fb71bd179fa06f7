// graphile-worker as its authors tune it for throughput: the settings of graphile/worker's own
// perfTest/graphile.config.js (24 concurrent jobs, a pool of 25, a local queue of 500 with a
// 10 ms refetch delay, and batched completion). Used by scripts/bench/peers/graphile.ts, which
// runs several `graphile-worker --once` processes in parallel as perfTest/run.js does.
const path = require('node:path');

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
  },
};
