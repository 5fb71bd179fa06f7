import path from 'node:path';
import { ROOT } from '../lib/processes.ts';

/**
 * One pg-boss configuration: one `work()` on the queue with `workers` fetch loops
 * (`localConcurrency`), each fetching `batchSize` jobs a fetch (peers/pgboss.ts). `keyed`: the
 * same-guarantee queue (key_strict_fifo, a key per job, completed jobs kept for the retention);
 * otherwise a standard queue, its fastest.
 */
export interface PgBossConfig {
  batchSize: number;
  workers: number;
  keyed?: boolean;
}

/** How big each measurement is: the full run (`npm run bench`) and the smoke run (`--smoke`). */
export type BenchParams = typeof FULL & {
  /** When set, each autocannon run sends this many requests per connection instead of httpSeconds (smoke). */
  httpRequestsPerConnection?: number;
  /** When set, pgbench runs this many transactions per client instead of pgbenchSeconds (smoke). */
  pgbenchTransactions?: number;
};

export const FULL = {
  // Interleaved runs per measurement: 5, so a median and its min–max say something on a shared machine.
  runs: 5,
  drainMessages: 20_000,
  // Messages committed in one statement onto idle long-running workers (the burst section).
  burstMessages: 20_000,
  // `graphile-worker --once` processes in the drain section (perfTest/run.js's PARALLELISM).
  graphileProcesses: 4,
  // The pg-boss configurations measured in the drain and burst sections; the best of each kind (keyed or not) is the one compared.
  pgBossConfigs: [
    { batchSize: 5_000, workers: 1 },
    { batchSize: 5_000, workers: 4 },
    { batchSize: 20_000, workers: 1 },
    { batchSize: 5_000, workers: 1, keyed: true },
    { batchSize: 5_000, workers: 4, keyed: true },
    { batchSize: 20_000, workers: 1, keyed: true },
  ] as PgBossConfig[],
  latencySamples: 500,
  // pg-boss polls (0.5 s at best): a sample costs ~0.5 s, so fewer of them (see docs/performance.md).
  pgBossLatencySamples: 60,
  // Enough work per process that start-up skew between processes does not dominate the 4-process run.
  ioMessages: 8_000,
  ioSleepMs: 20,
  ioProcesses: [1, 2, 4],
  // The backlog relayed into JetStream, and published by a bare JetStream client (the relay floor), in the relay section.
  relayMessages: 20_000,
  // Deliveries sent to a local no-op receiver in the webhooks section.
  webhookDeliveries: 5_000,
  // The webhooks isolation figure: booking events per second, for this many seconds, alone and beside a hanging endpoint.
  webhookRate: 100,
  webhookSeconds: 10,
  connections: [1, 8, 32],
  httpSeconds: 8,
  // graphile-worker CLI process counts in the burst section (in-process run() is one runner).
  burstGraphileProcesses: [1, 2],
  // Each burst configuration is measured after a warm-up batch (100 messages handled, then
  // burstIdleMs idle) and without one (started, idle, then the burst): the stronger is the one compared.
  burstWarmUps: [true, false],
  // How long every burst configuration sits idle before its burst (after the warm-up, if any).
  burstIdleMs: 1_000,
  // Samples of the bare LISTEN/NOTIFY round trip (the latency floor) per run.
  latencyFloorSamples: 500,
  // pgbench needs a little longer to be meaningful: with 32 clients, connecting alone takes most of a second.
  pgbenchSeconds: 8,
  outboxCostClients: 8,
  // The fanout section: the handlers a message's subscriptions come to (booking.created's three,
  // four with the events relay), the messages of each drain (×handlers effects), and its
  // interleaved rounds (the hot path's pgbench runs too, at outboxCostClients).
  fanoutHandlers: [3, 4],
  fanoutMessages: 10_000,
  fanoutRuns: 3,
  // The wal section: the backlog each system inserts and drains, and its interleaved rounds.
  walMessages: 20_000,
  walRuns: 3,
  // Our storage with each index cut not built yet measured alone and all together, or only together (smoke).
  walCandidates: 'each' as 'each' | 'together',
  // The held-snapshot section: messages a second, the load before the snapshot, and how long it is held.
  heldRate: 100,
  heldBeforeSeconds: 60,
  heldSeconds: 240,
  heldAfterSeconds: 5,
  conflictConnections: 32,
  claimPending: 10_000,
  claimDone: 1_000_000,
  claimSamples: 200,
  claimBatch: 20, // WORKER_BATCH_SIZE's default
  apiGuests: 16,
  apiProperties: 200,
  // Runs of the slow measurements of a long history: the purge alone (one purge of `purgeRows` a
  // run) and every drain and claim of the growth section. A run of the purge section takes over a
  // minute (its DELETE of a million rows alone 15–20 s): three runs, not five.
  historyRuns: 3,
  // DONE rows of the day the purge section purges both ways: deleted row by row, and its partition dropped.
  purgeRows: 1_000_000,
  // DONE rows of a larger day whose partition drop alone is measured (deleting them would take
  // minutes). Its template takes one to two minutes to build (once; cloned for each run).
  purgeLargeRows: 5_000_000,
  // Messages drained with and without a purge beside the worker (one process, our throughput settings).
  purgeDrainMessages: 20_000,
  // Claims timed per run with and without a purge beside them, for a p99 worth reading.
  purgeClaimSamples: 1_000,
  // The DONE history sizes of the growth section, and the drain and processes measured on each.
  growthHistories: [1_000, 100_000, 1_000_000],
  growthMessages: 20_000,
  growthProcesses: [1, 2, 4],
  // Past bookings in the table under the API in the api-history section.
  bookingHistory: 1_000_000,
};

/** The full run's settings, every size small enough for the smoke's two minutes. */
export const SMOKE: BenchParams = {
  ...FULL,
  runs: 1,
  drainMessages: 1_000,
  burstMessages: 1_000,
  // One --once process: the smoke checks the CLI's figures come out, and a process costs a
  // second of CPU to start.
  graphileProcesses: 1,
  // Each kind once, a standard queue and a keyed one (a configuration costs a drain and two bursts),
  // between them several work() loops and one.
  pgBossConfigs: [
    { batchSize: 500, workers: 2 },
    { batchSize: 5_000, workers: 1, keyed: true },
  ],
  latencySamples: 20,
  pgBossLatencySamples: 3,
  ioMessages: 200,
  ioProcesses: [1, 4],
  relayMessages: 500,
  webhookDeliveries: 100,
  webhookRate: 20,
  webhookSeconds: 1,
  httpSeconds: 1,
  httpRequestsPerConnection: 3,
  burstGraphileProcesses: [1],
  // The workers are idle once they listen (sections/burst.ts waits for that): the spell must be there, not long, and 16 configurations wait it out.
  burstIdleMs: 50,
  latencyFloorSamples: 20,
  pgbenchSeconds: 2,
  pgbenchTransactions: 10,
  fanoutHandlers: [3],
  fanoutMessages: 200,
  fanoutRuns: 1,
  walMessages: 200,
  walRuns: 1,
  walCandidates: 'together',
  heldRate: 50,
  heldBeforeSeconds: 1,
  // Its second half is the one compared: 25 messages at 50/s, enough for its figures to come out.
  heldSeconds: 1,
  heldAfterSeconds: 1,
  claimPending: 1_000,
  claimDone: 20_000,
  claimSamples: 20,
  apiGuests: 4,
  apiProperties: 10,
  historyRuns: 1,
  purgeRows: 20_000,
  purgeLargeRows: 40_000,
  purgeDrainMessages: 1_000,
  purgeClaimSamples: 50,
  growthHistories: [1_000, 20_000],
  growthMessages: 1_000,
  // One process on each history: drains by several processes are the drain, burst and io
  // sections' (the same drainOurs), and each process here costs a second of CPU to start.
  growthProcesses: [1],
  bookingHistory: 10_000,
};

/** Where a run writes bench-results.json and bench-results.md without --out: under var/, which git ignores. */
export const DEFAULT_OUT = path.join(ROOT, 'var', 'bench');
