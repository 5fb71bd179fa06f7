import type { Config } from '../config.ts';
import { TOPICS } from '../messages/topics.ts';
import * as outbox from '../outbox/index.ts';
import { FAILURE_RULES } from './failure-rules.ts';

/*
 * The outbox's runner as this application runs it: the one place where the configuration
 * (src/config.ts) becomes the runner's settings, and where the worker is given the topic
 * catalogue's payload schemas (src/messages/topics.ts) to check each message against, and the
 * application's failure rules (failure-rules.ts: SMTP 5xx is permanent, email addresses redacted).
 */

/** The runner's settings from the configuration: WORKER_*, LEASE_SECONDS, BACKOFF_*, … */
export function runnerSettings(config: Config): outbox.RunnerSettings {
  return {
    batchSize: config.WORKER_BATCH_SIZE,
    maxBatchSize: config.WORKER_MAX_BATCH_SIZE,
    concurrency: config.WORKER_CONCURRENCY,
    leaseSeconds: config.LEASE_SECONDS,
    maxAttempts: config.MAX_ATTEMPTS,
    backoff: { baseSeconds: config.BACKOFF_BASE_SECONDS, maxSeconds: config.BACKOFF_MAX_SECONDS, jitter: config.BACKOFF_JITTER },
    pollIntervalMs: config.POLL_INTERVAL_MS,
    unknownTopicRecheckSeconds: config.UNKNOWN_TOPIC_RECHECK_SECONDS,
    listenConnectionString: config.DATABASE_URL,
    housekeepingIntervalSeconds: config.HOUSEKEEPING_INTERVAL_SECONDS,
    retentionDays: config.OUTBOX_RETENTION_DAYS,
    ...(config.OUTBOX_WRITES === 'wal' ? { walSlot: config.OUTBOX_SLOT } : {}),
  };
}

type Overridable = 'batchSize' | 'maxBatchSize' | 'concurrency';

/** The runner's options with `config` in place of its settings; a flag may still set the claim sizes and concurrency. */
export interface ConfiguredWorkerOptions
  extends
    Omit<outbox.WorkerOptions, keyof outbox.RunnerSettings | 'payloadSchemas' | 'failureRules'>,
    Partial<Pick<outbox.RunnerSettings, Overridable>> {
  config: Config;
}

/** The outbox worker with this application's settings, payload schemas and failure rules. */
export function createConfiguredWorker({ config, batchSize, maxBatchSize, concurrency, ...rest }: ConfiguredWorkerOptions): outbox.Worker {
  const settings = runnerSettings(config);
  return outbox.createWorker({
    ...settings,
    batchSize: batchSize ?? settings.batchSize,
    maxBatchSize: maxBatchSize ?? settings.maxBatchSize,
    concurrency: concurrency ?? settings.concurrency,
    payloadSchemas: TOPICS,
    failureRules: FAILURE_RULES,
    ...rest,
  });
}
