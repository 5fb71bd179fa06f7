import { nanos } from '@nats-io/transport-node';
import {
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import { backoffDelaySeconds } from '../outbox/index.ts';
import { streamSubjects } from './subjects.ts';
import { jetStreamNotNow } from './connection.ts';

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
export function outboxRetrySpanSeconds(
  config: Pick<Config, 'MAX_ATTEMPTS' | 'LEASE_SECONDS' | 'BACKOFF_BASE_SECONDS' | 'BACKOFF_MAX_SECONDS'>,
): number {
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
    // Nothing but age removes an event: a count, size or per-subject limit would drop events some
    // group has not read (the relay would still see PubAcks), and "discard new" would refuse them.
    max_msgs: -1,
    max_bytes: -1,
    max_msgs_per_subject: -1,
    max_msg_size: -1,
    discard: DiscardPolicy.Old,
    discard_new_per_subject: false,
    max_age: nanos(config.EVENTS_MAX_AGE_SECONDS * 1000),
    num_replicas: config.EVENTS_REPLICAS,
    duplicate_window: nanos(duplicateWindowSeconds(config) * 1000),
  };
}
type WithName<T> = Partial<T> & { name: string };

/** One setting of an existing stream or consumer that is not what the configuration wants. */
export interface SettingDifference {
  field: string;
  have: string;
  want: string;
  /** False when this process may not change it: JetStream refuses, or only the relay may. */
  fixedInPlace: boolean;
  /** Why it cannot be changed here, when not the default "cannot change in place". */
  why?: string;
}

/** "field: have X, want Y", and why it stops the process when it cannot be changed in place. */
export function describeDifferences(differences: SettingDifference[]): string {
  return differences
    .map((d) => `${d.field}: have ${d.have}, want ${d.want}${d.fixedInPlace ? '' : ` (${d.why ?? 'cannot change in place'})`}`)
    .join('; ');
}

/**
 * Who is asking. The relay (the worker, whose publishes the duplicate window protects) owns the
 * settings that come from its environment: subjects, max age, replicas and the duplicate window.
 * A reader (a consumer, any other process) may create the stream when there is none, but never
 * rewrites those on an existing one: its environment may be the defaults, and a consumer with
 * defaults once cut the worker's 2,778 s window to 794 s. Settings every process wants alike
 * (retention, storage, the limits, discard, sealed) anyone checks, and fixes when it can.
 */
export type StreamRole = 'relay' | 'reader';

export interface EnsureStreamOptions {
  /** Default 'reader': only the relay's publisher passes 'relay'. */
  role?: StreamRole;
  /** Where a change made in place is reported. */
  log?: Logger;
  /**
   * The relay may lower the stream's max age (EVENTS_ALLOW_SHORTER_MAX_AGE). Off, a stream that
   * keeps events longer than EVENTS_MAX_AGE_SECONDS is not changed: lowering it drops at once
   * every event older than the new age, history no replay can get back.
   */
  allowShorterMaxAge?: boolean;
}

/** -1 and 0 (or absent) both mean "no limit" to the server; it reports -1. */
const limit = (v: number | undefined) => (v === undefined || v === 0 ? -1 : v);
const seconds = (ns: number | undefined) => `${(ns ?? 0) / 1e9} s`;
const list = (v: string[] | undefined) => `[${(v ?? []).join(', ')}]`;
const sameSet = (a: string[] | undefined, b: string[] | undefined) =>
  JSON.stringify([...(a ?? [])].sort()) === JSON.stringify([...(b ?? [])].sort());
/** Whether a stream's subjects `have` list every one of `want` (others may be there too). */
export const holdsEvery = (have: string[] | undefined, want: string[]) => want.every((subject) => (have ?? []).includes(subject));

/**
 * Every setting that can lose, drop or refuse events, compared with what `want` says. Settings
 * `want` leaves out are not compared (the server's default is the configuration's choice).
 */
export function streamDifferences(
  have: StreamConfig,
  want: WithName<StreamConfig>,
  role: StreamRole,
  allowShorterMaxAge = false,
): SettingDifference[] {
  const out: SettingDifference[] = [];
  const check = (field: string, differs: boolean, h: string, w: string, fixedInPlace = true, why?: string) => {
    if (differs) out.push({ field, have: h, want: w, fixedInPlace, ...(why ? { why } : {}) });
  };
  const relay = role === 'relay';
  if (want.subjects && relay) check('subjects', !sameSet(have.subjects, want.subjects), list(have.subjects), list(want.subjects));
  // A reader needs its subjects in the stream (or it reads nothing), and leaves any others alone.
  if (want.subjects && !relay) {
    check(
      'subjects',
      !holdsEvery(have.subjects, want.subjects),
      list(have.subjects),
      `${list(want.subjects)} among them`,
      false,
      'only the relay changes them: same EVENTS_SUBJECT_PREFIX?',
    );
  }
  // JetStream cannot change these two on an existing stream; workqueue or interest retention
  // deletes an event once one group has it, so the other groups never see it.
  if (want.retention) check('retention', have.retention !== want.retention, have.retention, want.retention, false);
  if (want.storage) check('storage', have.storage !== want.storage, have.storage, want.storage, false);
  for (const field of ['max_msgs', 'max_bytes', 'max_msgs_per_subject', 'max_msg_size'] as const) {
    if (want[field] !== undefined)
      check(field, limit(have[field]) !== limit(want[field]), String(limit(have[field])), String(limit(want[field])));
  }
  if (want.discard) check('discard', have.discard !== want.discard, have.discard, want.discard);
  if (want.discard_new_per_subject !== undefined) {
    const h = have.discard_new_per_subject ?? false;
    check('discard_new_per_subject', h !== want.discard_new_per_subject, String(h), String(want.discard_new_per_subject));
  }
  // The relay's alone (StreamRole). Its window is never below its own retry span: desiredStream
  // refuses to compute one that is.
  if (relay) {
    if (want.max_age !== undefined) {
      // 0 keeps events for ever: any other age is shorter.
      const shorter = want.max_age > 0 && (have.max_age === 0 || have.max_age > want.max_age);
      check(
        'max_age',
        have.max_age !== want.max_age,
        seconds(have.max_age),
        seconds(want.max_age),
        !shorter || allowShorterMaxAge,
        'it would drop at once every event older than that; set EVENTS_ALLOW_SHORTER_MAX_AGE=true to mean it',
      );
    }
    if (want.num_replicas !== undefined)
      check('num_replicas', have.num_replicas !== want.num_replicas, String(have.num_replicas), String(want.num_replicas));
    if (want.duplicate_window !== undefined) {
      check(
        'duplicate_window',
        have.duplicate_window !== want.duplicate_window,
        seconds(have.duplicate_window),
        seconds(want.duplicate_window),
      );
    }
  }
  // A sealed stream refuses every publish, and JetStream cannot unseal it.
  check('sealed', have.sealed === true, 'true', 'false', false);
  return out;
}

/** Changes in place the settings `differences` name (all of them fixedInPlace) to what `want` says. */
export async function bringBack(
  jsm: JetStreamManager,
  current: StreamInfo,
  want: WithName<StreamConfig>,
  differences: SettingDifference[],
): Promise<StreamInfo> {
  const changes = Object.fromEntries(differences.map((d) => [d.field, want[d.field as keyof StreamConfig]]));
  // Discard "new" per subject needs discard "new": they change together.
  if ('discard' in changes || 'discard_new_per_subject' in changes) {
    Object.assign(changes, {
      discard: want.discard ?? current.config.discard,
      discard_new_per_subject: want.discard_new_per_subject ?? false,
    });
  }
  return jsm.streams.update(want.name, { ...current.config, ...changes });
}

/**
 * How long a process that found the stream deleted waits before creating it again. nats-server
 * stops answering for a deleted stream before it has removed its files; a stream of the same name
 * created in between has its files removed under it (nats-server 2.9: publishes then fail with
 * "error opening msg block file", a consumer on it never delivers). 200 ms was enough in 20 of 20
 * tries on a test server; the margin is for a big stream's files.
 */
export const DELETED_STREAM_SETTLE_MS = 2000;

/** "stream name already in use with a different configuration": another process created it first. */
const STREAM_NAME_IN_USE = 10058;

/**
 * Creates the stream, or brings an existing one to the configuration: every setting that can lose
 * or drop events (streamDifferences) is compared, those of the relay only when `role` is 'relay'.
 * What this process may change and JetStream can change in place is changed (and logged: someone
 * set it by hand, or another configuration did); when anything cannot be (storage, retention, a
 * sealed stream, subjects a reader lacks) nothing is, and one StreamConfigError names every
 * difference, at start, instead of events going missing later. What else JetStream refuses (a
 * subject overlapping another stream) is a StreamConfigError too; its "not now" (an election, too
 * few nodes up for the replicas: jetStreamNotNow) is thrown as it came, for the caller to wait out.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  want: WithName<StreamConfig>,
  opts: EnsureStreamOptions = {},
): Promise<StreamInfo> {
  const role = opts.role ?? 'reader';
  try {
    for (let attempt = 0; ; attempt++) {
      let current: StreamInfo;
      try {
        current = await jsm.streams.info(want.name);
      } catch (err) {
        if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) throw err;
        try {
          return await jsm.streams.add(want);
        } catch (addErr) {
          // Created meanwhile by another process (the relay and a consumer starting together): compare with that one.
          if (attempt === 0 && addErr instanceof JetStreamApiError && addErr.code === STREAM_NAME_IN_USE) continue;
          throw addErr;
        }
      }
      const differences = streamDifferences(current.config, want, role, opts.allowShorterMaxAge);
      if (differences.length === 0) return current;
      if (differences.some((d) => !d.fixedInPlace)) {
        throw new StreamConfigError(
          `stream ${want.name} does not match the configuration: ${describeDifferences(differences)}. ` +
            `What cannot change in place: remove the stream (nats stream rm ${want.name}) after its ` +
            `consumers have caught up, or set EVENTS_STREAM to a new name`,
        );
      }
      const updated = await bringBack(jsm, current, want, differences);
      opts.log?.warn(
        { stream: want.name, changed: describeDifferences(differences) },
        'events stream settings brought back to the configuration',
      );
      return updated;
    }
  } catch (err) {
    if (err instanceof StreamConfigError) throw err;
    // The cluster electing, or short of nodes to place the replicas on: not the configuration's fault.
    if (jetStreamNotNow(err)) throw err;
    if (err instanceof JetStreamApiError) {
      throw new StreamConfigError(
        `JetStream refused stream ${want.name} as configured (${err.message}); check EVENTS_* against the server`,
      );
    }
    throw err;
  }
}
