import type { ConflictRun } from './api.ts';
import type { Burst } from './burst.ts';
import type { Beside, DropCost, PurgeCost } from './history.ts';
import type { codeVersion, loadBefore } from './lib/trace.ts';
import type { machine, versions } from './lib/server.ts';
import type { Compared, Repeated } from './lib/stats.ts';
import type { OverloadResults } from './overload.ts';
import type { BenchParams } from './params.ts';

/*
 * bench-results.json's shape: what each section measured, the run's conditions and the targets.
 * The sections (sections/*.ts) fill it, report.ts and targets.ts read it.
 */

export type Drain = { perSecond: number; drainSeconds: number };

/** A pgbench run of the booking transaction, with the WAL it wrote per transaction. */
export type HotPathRun = { tps: number; p99: number; walBytesPerTransaction: number };

/** A drain counted in effects (handler runs), with the WAL from the first insert through the last DONE per effect. */
export type FanoutDrain = { effectsPerSecond: number; seconds: number; walBytesPerEffect: number };
/** One system under a held snapshot (sections/held-snapshot.ts): latencies in ms, counts of messages. */
export type HeldSnapshotRun = {
  produced: number;
  skipped: number;
  left: number;
  p50Before: number;
  p99Before: number;
  p50Held: number;
  p99Held: number;
  ratio: number;
};
/** One system's insert-to-completion writes, per message (the wal section). */
export type WalPerMessage = { walBytes: number; indexEntries: number; records: number };

export type Lat = { p50: number; p99: number; max: number; mean: number };

export type ClaimLat = { p50: number; p99: number };

/** The noisy neighbour's sizes (noisy.ts NOISY_FULL, NOISY_SMOKE). */
export interface NoisyParams {
  flood: number;
  hosts: number;
  rate: number;
  seconds: number;
  handlerMs: number;
}

export type NoisyMode = 'quiet' | 'fair' | 'fifo';

export type NoisyRun = {
  bookings: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Flood messages handled while the bookings were being written, per second. */
  floodPerSecond: number;
  /** How long writing the flood took (0 without one). */
  floodWriteMs: number;
};

export interface NoisyResult {
  params: NoisyParams;
  quiet: Repeated<NoisyRun>;
  fair: Repeated<NoisyRun>;
  fifo: Repeated<NoisyRun>;
  /** Medians: fair p99 / quiet p99, fifo p99 / quiet p99. */
  fairToQuietP99: number;
  fifoToQuietP99: number;
}

/** Tracing off, on with sampling at 0, and on with every trace exported (tracing.ts). */
export type TracingMode = 'off' | 'sampled0' | 'exported';

export interface TracingResults {
  connections: number;
  api: Record<TracingMode, Repeated<{ rps: number; p99: number }>>;
  drain: Record<TracingMode, Repeated<{ perSecond: number }>>;
  /** Medians, each over off. */
  apiRatio: { sampled0: number; exported: number };
  drainRatio: { sampled0: number; exported: number };
  /** What the receiver got over the whole section (requests, MiB). */
  exported: { requests: number; mib: number };
}

export type ApiLat = { rps: number; p50: number; p99: number };

/**
 * A performance target (what "good" means; the run reports where we stand and never fails on
 * them). `met` is null when the figure could not be measured in this run.
 */
export interface TargetResult {
  name: string;
  target: string;
  value: string;
  met: boolean | null;
}

export interface BenchResults {
  mode: 'full' | 'smoke';
  startedAt: string;
  durationSeconds?: number;
  /** The code measured: HEAD and whether the tree had uncommitted changes. */
  code: ReturnType<typeof codeVersion>;
  /** The 1-minute load average before each section; `overloaded` when it exceeded the cores. */
  load: Record<string, ReturnType<typeof loadBefore>>;
  /** Each section's wall-clock time, failures included: where a run's minutes go (the smoke's too). */
  seconds: Record<string, number>;
  machine: ReturnType<typeof machine>;
  versions: ReturnType<typeof versions>;
  postgresSettings: Record<string, string>;
  params: BenchParams;
  setup: Record<string, string>;
  claim?: { runs: Repeated<{ emptyMs: number; withHistoryMs: number; ratio: number }>; explain: string };
  /**
   * The backlog drain. Configurations: ours1, ours2 (throughput settings), ours1Default; floor1,
   * floor2 (floors.ts drainFloor, 1 and 2 lanes); the peers'. `floorRatios`: ours ×n / floor ×n.
   */
  drain?: Compared<Drain> & { floorRatios: { ours1: number; ours2: number } };
  /** Idle workers hit by one burst; each configuration after a warm-up batch and without (`…Cold`). */
  burst?: Compared<Burst> & { messages: number };
  /** Commit → handler, and the bare LISTEN/NOTIFY round trip (floors.ts latencyFloor); `floorRatios`: ours / floor. */
  latency?: {
    ours: Repeated<Lat>;
    graphile: Repeated<Lat>;
    pgBoss: Repeated<Lat>;
    /** Each peer's same-guarantee configuration: a queue per key (peers/guarantees.ts). */
    graphileKeyed: Repeated<Lat>;
    pgBossKeyed: Repeated<Lat>;
    floor: Repeated<Lat>;
    floorRatios: { p50: number; p99: number };
  };
  /** The events relay (relay.ts) against the relay floor (a bare JetStream client); null: nats-server not installed. */
  relay?: {
    messages: number;
    relay: Repeated<Drain>;
    floor: Repeated<Drain>;
    /** Median relay msg/s over median floor msg/s (target ≥ 0.8). */
    ratio: number;
    /** The same relay into a three-node cluster, the stream at three replicas (absent in results of older runs). */
    replicated?: Repeated<Drain>;
    /** Median relay msg/s at three replicas over median at one. */
    replicatedRatio?: number;
  } | null;
  io?: { byProcesses: Record<string, Repeated<Drain>>; scaling: Record<string, number> };
  /**
   * Webhooks (webhooks.ts): deliveries/s to a local no-op receiver, as a ratio to our no-op drain
   * ×1 when the drain section ran; a healthy endpoint's latency alone and beside a hanging one.
   */
  tracing?: TracingResults;
  webhooks?: {
    deliveries: number;
    /** With kept-alive connections (the default). */
    throughput: Repeated<{ perSecond: number; seconds: number }>;
    /** The same, a new connection per attempt (WEBHOOK_KEEP_ALIVE=false); `keepAliveRatio`: kept-alive / this, medians. */
    throughputPerAttemptConnection: Repeated<{ perSecond: number; seconds: number }>;
    keepAliveRatio: number;
    /**
     * CPU µs per delivery during the run, each way: the sender's process, the receiver's (from
     * its first request), PostgreSQL's (every process of the server, read from /proc; both left
     * out off Linux). What bounds deliveries/s when the three share the machine's cores.
     */
    cpu?: Repeated<{ sender: number; receiver: number; postgres: number }>;
    cpuPerAttemptConnection?: Repeated<{ sender: number; receiver: number; postgres: number }>;
    ratioToNoopDrain: number | null;
    isolation: Repeated<{ aloneP50: number; aloneP99: number; besideP50: number; besideP99: number; p99Ratio: number }>;
  };
  /** Noisy neighbour (noisy.ts): quiet hosts' booking emails beside one host's flood, with priorities and turns and FIFO. */
  noisy?: NoisyResult;

  api?: {
    byConnections: {
      connections: number;
      api: Repeated<{ rps: number; p99: number }>;
      pgbench: Repeated<{ tps: number; p99: number }> | null;
      ratio: number | null;
    }[];
    non201: number;
    /**
     * The target's comparison, at 8 connections: pgbench with `-M prepared`, the protocol of the
     * API's named booking statements (parsed once per connection). `byConnections` compares with
     * pgbench -M extended (parse, bind and execute every time), the looser peer.
     */
    prepared: { connections: number; pgbench: Repeated<{ tps: number; p99: number }>; ratio: number } | null;
    /**
     * The same POST /bookings, in the same runs, against a second API through PgBouncer in
     * transaction mode (DATABASE_POOLER=transaction; startPooledApi); ratio: pooled / direct
     * median req/s. Null without pgbouncer.
     */
    pooled?: {
      serverConnections: number;
      byConnections: { connections: number; pooled: Repeated<{ rps: number; p99: number }>; ratio: number }[];
      non201: number;
    } | null;
  };
  outboxCost?: {
    clients: number;
    withOutbox: Repeated<{ tps: number; p99: number }>;
    withoutOutbox: Repeated<{ tps: number; p99: number }>;
    ratio: number;
    costPercent: number;
    /** The same pair with prepared statements (-M prepared), as the API sends them straight to PostgreSQL; absent in results from before it was measured. */
    prepared?: {
      withOutbox: Repeated<{ tps: number; p99: number }>;
      withoutOutbox: Repeated<{ tps: number; p99: number }>;
      ratio: number;
      costPercent: number;
    };
    diagnostics: {
      rowWithoutNotify: Repeated<{ tps: number; p99: number }>;
      notifyInTransaction: Repeated<{ tps: number; p99: number }>;
      rowWithoutNotifyCostPercent: number;
      notifyInTransactionCostPercent: number;
    };
  } | null;
  /**
   * One outbox row per message (as written) against one row per subscription (fan-out at
   * enqueue), on the booking's hot path (pgbench; null without it) and in the drain (fanout.ts).
   */
  /** Each system's WAL bytes, index entries and WAL records per message, insert to completion (sections/wal.ts). */
  heldSnapshot?: {
    rate: number;
    beforeSeconds: number;
    heldSeconds: number;
    systems: Record<string, HeldSnapshotRun & { label: string }>;
  };
  wal?: { messages: number; systems: Record<string, Repeated<WalPerMessage> & { label: string }> };
  fanout?: {
    handlers: number[];
    hotPath: {
      clients: number;
      /** `none`, `perMessage`, and `perSubscription<K>` for each K of `handlers`. */
      variants: Record<string, Repeated<HotPathRun>>;
      /** Index entries the variant's outbox rows write per booking: per row (the partial indexes a new row enters) × rows. */
      indexEntriesPerTransaction: Record<string, number>;
      /** The indexes of the partition the rows went to (the entries above count only those a new row enters). */
      indexesOnPartition: number;
    } | null;
    drain: {
      messages: number;
      byHandlers: {
        handlers: number;
        perMessage: Repeated<FanoutDrain>;
        perSubscription: Repeated<FanoutDrain>;
        /** Medians, per subscription over per message: effects/s, and WAL bytes per effect. */
        effectsRatio: number;
        walRatio: number;
      }[];
    };
  };
  conflicts?: {
    connections: number;
    runs: Repeated<ConflictRun>;
    expectedShare409: number;
  };
  /**
   * A long DONE history and its purge (history.ts): `rows` DONE rows in a day partition of their
   * own, purged at the clock where the retention has passed over that day, both ways, each once a
   * run on a fresh clone: deleted row by row (`deleteRows`: the path of a day that cannot go whole,
   * and the purge before partitions) and the partition dropped (`dropPartition`, as the
   * housekeeping drops an expired day); the drop alone of a larger day (`dropLargePartition`); and
   * our drain and claim alone, beside the DELETE and beside the DROP. Ratios: median beside /
   * median alone.
   */
  purge?: {
    rows: number;
    deleteRows: Repeated<PurgeCost>;
    dropPartition: Repeated<DropCost>;
    dropLargePartition: { rows: number; runs: Repeated<DropCost> };
    drain: {
      messages: number;
      alone: Repeated<Drain>;
      besideDelete: Repeated<Drain & Beside>;
      besideDrop: Repeated<Drain & Beside>;
      deleteRatio: number;
      dropRatio: number;
    };
    claim: {
      samples: number;
      pending: number;
      alone: Repeated<ClaimLat>;
      besideDelete: Repeated<ClaimLat & Beside>;
      besideDrop: Repeated<ClaimLat & Beside>;
      deleteP50Ratio: number;
      deleteP99Ratio: number;
      dropP50Ratio: number;
      dropP99Ratio: number;
    };
  };
  /** Our drain (throughput settings) and claim on outboxes holding a DONE history of each size. */
  growth?: {
    messages: number;
    byHistory: { history: number; byProcesses: Record<string, Repeated<Drain>>; claimMs: Repeated<{ ms: number }> }[];
  };
  /** POST /bookings at `connections` on an empty bookings table and on one holding `bookings` past stays. */
  apiHistory?: {
    connections: number;
    bookings: number;
    empty: Repeated<ApiLat>;
    history: Repeated<ApiLat>;
    p50Ratio: number;
    p99Ratio: number;
    non201: number;
  };
  /** Half the clients booking, half searching, with and without load shedding (overload.ts). */
  overload?: OverloadResults;
  targets?: TargetResult[];
  errors: { section: string; message: string }[];
}
