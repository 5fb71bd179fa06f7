import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import type { BackoffOptions } from '../backoff.ts';
import type { ClaimConnection } from '../claim-connection.ts';
import type { PayloadSchema } from '../types.ts';
import type { FailureRules } from './failures.ts';
import type { Chore } from './housekeeping.ts';
import type { HandlerRegistry } from './registry.ts';

/**
 * Every number the runner reads, as plain values: the runner knows no environment variable. The
 * application maps its configuration to these in one place (src/worker/outbox-worker.ts).
 */
export interface RunnerSettings {
  /**
   * The replication slot of messages written to the WAL (OUTBOX_WRITES=wal): each claim first makes
   * their rows (src/outbox/wal-messages.ts). Unset: messages are rows already.
   */
  walSlot?: string;
  /** The first and smallest claim; a backlog grows it, claim after claim, up to maxBatchSize (./claim-size.ts). */
  batchSize: number;
  maxBatchSize: number;
  /** Handlers in flight at once. */
  concurrency: number;
  /** How long a claim holds a message; the heartbeat extends it while its handlers run (./heartbeat.ts). */
  leaseSeconds: number;
  /** Attempts before a failing message is DEAD. */
  maxAttempts: number;
  /** The retry schedule (src/outbox/backoff.ts); a postponement's wait is capped by its maxSeconds. */
  backoff: Omit<BackoffOptions, 'random'>;
  /** start()'s fallback poll, for a wake-up that was lost. */
  pollIntervalMs: number;
  /** How long a message of a topic without handler waits before it is looked at again. */
  unknownTopicRecheckSeconds: number;
  /** The database start() LISTENs on, through a connection of its own (./listener.ts). */
  listenConnectionString: string;
  /** The housekeeping's period, and the days DONE messages are kept before it purges them. */
  housekeepingIntervalSeconds: number;
  retentionDays: number;
}

export interface WorkerOptions extends RunnerSettings {
  db: Db;
  registry: HandlerRegistry;
  logger: Logger;
  /**
   * The application's payload schemas by topic: a message's payload is parsed with its topic's
   * before its handlers run, and a payload that fails is DEAD at once. A topic without a schema
   * is handed its payload as stored.
   */
  payloadSchemas?: Readonly<Record<string, PayloadSchema>>;
  /**
   * The application's rules about failures (runner/failures.ts): what else is permanent beyond
   * PermanentError, what an error's text must not keep, what a bad payload is called. Each field
   * left out keeps the neutral rule: nothing more is permanent, nothing is redacted.
   */
  failureRules?: Partial<FailureRules>;
  /** start() LISTENs on the outbox channel (default true). Without it the worker only polls. */
  listen?: boolean;
  /** start() runs the housekeeping every housekeepingIntervalSeconds (default true). */
  housekeeping?: boolean;
  /** The application's tables the housekeeping also keeps small. */
  chores?: readonly Chore[];
  /**
   * A line at info for every message done (default false: at info a worker logs its progress once a
   * minute, since a line per message costs a busy worker a quarter of its throughput).
   */
  logEachMessage?: boolean;
  /** For the backoff jitter; Math.random otherwise. */
  random?: () => number;
  /** Where claims are sent (default: a ClaimConnection beside `db`'s pool). The worker closes it when it stops. */
  claimConnection?: ClaimConnection;
}
