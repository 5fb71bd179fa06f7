import { nanos } from '@nats-io/transport-node';
import {
  DiscardPolicy,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import type { Config } from '../config.ts';
import { backoffDelaySeconds } from '../outbox/index.ts';
import { streamSubjects } from './subjects.ts';

/** A stream that exists and cannot be made to match the configuration. Stops the process at start. */
export class StreamConfigError extends Error {
  readonly code = 'events_stream_mismatch';
  constructor(message: string) {
    super(message);
    this.name = 'StreamConfigError';
  }
}

/**
 * The longest a message can take from its first claim to its last, in seconds: every backoff
 * delay between MAX_ATTEMPTS attempts (un-jittered: jitter only shortens them) plus a full lease
 * per attempt (a worker killed mid-publish leaves its claim until the lease runs out).
 * A republish after a crash happens inside this span, so a duplicate window at least this long
 * lets the server drop it (by Nats-Msg-Id).
 */
export function outboxRetrySpanSeconds(config: Pick<Config, 'MAX_ATTEMPTS' | 'LEASE_SECONDS' | 'BACKOFF_BASE_SECONDS' | 'BACKOFF_MAX_SECONDS'>): number {
  let span = config.MAX_ATTEMPTS * config.LEASE_SECONDS;
  for (let n = 1; n < config.MAX_ATTEMPTS; n++) {
    span += backoffDelaySeconds(n, { baseSeconds: config.BACKOFF_BASE_SECONDS, maxSeconds: config.BACKOFF_MAX_SECONDS });
  }
  return Math.ceil(span);
}

/**
 * The duplicate window: the retry span plus a minute for clocks and slow handlers, or
 * EVENTS_DUPLICATE_WINDOW_SECONDS, which may be longer but not shorter. With the defaults
 * (8 attempts, 60 s lease, 2…256 s backoff): 8×60 + 254 + 60 = 794 s.
 */
export function duplicateWindowSeconds(config: Config): number {
  const span = outboxRetrySpanSeconds(config);
  const wanted = config.EVENTS_DUPLICATE_WINDOW_SECONDS ?? span + 60;
  if (wanted < span) {
    throw new StreamConfigError(
      `EVENTS_DUPLICATE_WINDOW_SECONDS=${wanted} is shorter than the outbox's retry span (${span} s from MAX_ATTEMPTS, ` +
        `LEASE_SECONDS and BACKOFF_*): a publish repeated after a crash could be stored twice. Raise it or leave it unset.`,
    );
  }
  if (wanted > config.EVENTS_MAX_AGE_SECONDS) {
    throw new StreamConfigError(
      `the duplicate window (${wanted} s) is longer than EVENTS_MAX_AGE_SECONDS (${config.EVENTS_MAX_AGE_SECONDS} s); JetStream refuses that`,
    );
  }
  return wanted;
}

/** The stream as configuration describes it. */
export function desiredStream(config: Config): WithName<StreamConfig> {
  return {
    name: config.EVENTS_STREAM,
    subjects: streamSubjects(config.EVENTS_SUBJECT_PREFIX),
    storage: StorageType.File,
    // Limits: events stay for max_age whether or not anyone read them (a log, not a work queue),
    // so a consumer group can start late or rewind.
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    max_age: nanos(config.EVENTS_MAX_AGE_SECONDS * 1000),
    num_replicas: config.EVENTS_REPLICAS,
    duplicate_window: nanos(duplicateWindowSeconds(config) * 1000),
  };
}
type WithName<T> = Partial<T> & { name: string };

const IMMUTABLE = ['storage', 'retention'] as const satisfies readonly (keyof StreamConfig)[];

/**
 * Creates the stream, or brings an existing one to the configuration. Fields JetStream cannot
 * change in place (storage, retention) and updates it refuses (replicas above the cluster size,
 * a subject overlapping another stream) become one StreamConfigError that says what to do,
 * raised at start, instead of every publish failing later.
 */
export async function ensureStream(jsm: JetStreamManager, want: WithName<StreamConfig>): Promise<StreamInfo> {
  let current: StreamInfo | undefined;
  try {
    current = await jsm.streams.info(want.name);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === 10059)) throw err; // 10059: stream not found
  }
  try {
    if (!current) return await jsm.streams.add(want);
    for (const field of IMMUTABLE) {
      if (want[field] !== undefined && current.config[field] !== want[field]) {
        throw new StreamConfigError(
          `stream ${want.name} exists with ${field}=${String(current.config[field])} but configuration wants ${String(want[field])}, ` +
            `which JetStream cannot change in place: remove the stream (nats stream rm ${want.name}) after its consumers have caught up, ` +
            `or set EVENTS_STREAM to a new name`,
        );
      }
    }
    const differs =
      current.config.max_age !== want.max_age ||
      current.config.duplicate_window !== want.duplicate_window ||
      current.config.num_replicas !== want.num_replicas ||
      JSON.stringify([...(current.config.subjects ?? [])].sort()) !== JSON.stringify([...(want.subjects ?? [])].sort());
    if (!differs) return current;
    const { name: _name, storage: _s, retention: _r, ...changes } = want;
    return await jsm.streams.update(want.name, { ...current.config, ...changes });
  } catch (err) {
    if (err instanceof StreamConfigError) throw err;
    if (err instanceof JetStreamApiError) {
      throw new StreamConfigError(`JetStream refused stream ${want.name} as configured (${err.message}); check EVENTS_* against the server`);
    }
    throw err;
  }
}
