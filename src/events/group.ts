import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  ReplayPolicy,
  type ConsumerConfig,
  type ConsumerInfo,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { ConfigError } from '../config.ts';
import type { Logger } from '../logger.ts';
import { describeDifferences, type SettingDifference } from './stream.ts';

/*
 * A consumer group's durable consumer on the events stream (src/events/consumer.ts runs it): the
 * settings it must have, created or brought back to them at start, and moved for a replay.
 */

export interface GroupOptions {
  stream: string;
  group: string;
  /** Subjects this group reads (one filter; NATS 2.9 takes a single filter subject). */
  filterSubject: string;
  ackWaitSeconds: number;
  maxDeliver: number;
  batchSize: number;
}

/** Where a (re)created group starts: the stream's first event, or the first at or after a time. */
export type StartAt = { from: 'start' } | { from: 'time'; time: Date };

/**
 * An existing durable consumer whose settings would lose, drop or stall the group's events and
 * that JetStream cannot change in place. A configuration problem (exit 2), named field by field.
 */
export class GroupConfigError extends ConfigError {
  readonly code = 'events_group_mismatch';
  constructor(message: string) {
    super([message]);
    this.message = message;
    this.name = 'GroupConfigError';
  }
}

/** The durable consumer a group wants (ensureGroup compares an existing one with it). */
function desiredGroup(o: GroupOptions, start: StartAt) {
  return {
    durable_name: o.group,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(o.ackWaitSeconds * 1000),
    // Unlimited on purpose (see the top of consumer.ts): the group dead-letters at o.maxDeliver.
    max_deliver: -1,
    filter_subject: o.filterSubject,
    // Enough outstanding for one pull batch per process of the group.
    max_ack_pending: Math.max(1000, o.batchSize * 10),
    replay_policy: ReplayPolicy.Instant,
    ...(start.from === 'time'
      ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.time.toISOString() }
      : { deliver_policy: DeliverPolicy.All }),
  } satisfies Partial<ConsumerConfig>;
}

/**
 * Where an existing group may start: from the beginning, or from a time or a sequence (what a
 * replay sets). "new" and "last…" skipped the events that were in the stream when it was created.
 */
const KEEPS_EVERY_EVENT: string[] = [DeliverPolicy.All, DeliverPolicy.StartTime, DeliverPolicy.StartSequence];

/** Every setting of an existing durable that can lose, drop or stall the group's events. */
function groupDifferences(have: ConsumerConfig, want: ReturnType<typeof desiredGroup>): SettingDifference[] {
  const out: SettingDifference[] = [];
  const check = (field: string, differs: boolean, h: unknown, w: unknown, fixedInPlace = true) => {
    if (differs) out.push({ field, have: String(h), want: String(w), fixedInPlace });
  };
  const seconds = (ns: number | undefined) => `${(ns ?? 0) / 1e9} s`;
  // "none" and "all" acknowledge events nobody handled: a crash loses them. JetStream cannot change it.
  check('ack_policy', have.ack_policy !== want.ack_policy, have.ack_policy, want.ack_policy, false);
  check('deliver_policy', !KEEPS_EVERY_EVENT.includes(have.deliver_policy), have.deliver_policy, want.deliver_policy, false);
  // "original" hands events out at the pace they were published: a backlog never catches up.
  check(
    'replay_policy',
    (have.replay_policy ?? ReplayPolicy.Instant) !== want.replay_policy,
    have.replay_policy,
    want.replay_policy,
    false,
  );
  // A push consumer of the same name: pulls fail, the group reads nothing.
  check('deliver_subject', Boolean(have.deliver_subject), have.deliver_subject, '(none: a pull consumer)', false);
  // The server stops redelivering after max_deliver: the event is dropped without a dead letter.
  check('max_deliver', (have.max_deliver ?? -1) !== want.max_deliver, have.max_deliver ?? -1, want.max_deliver);
  check('ack_wait', have.ack_wait !== want.ack_wait, seconds(have.ack_wait), seconds(want.ack_wait));
  const filter = have.filter_subjects?.length ? have.filter_subjects.join(', ') : (have.filter_subject ?? '');
  check('filter_subject', filter !== want.filter_subject, filter || '(none)', want.filter_subject);
  // Fewer outstanding than one pull batch per process stalls the group behind one slow event.
  const pending = have.max_ack_pending ?? -1;
  check('max_ack_pending', pending !== -1 && pending < want.max_ack_pending, pending, want.max_ack_pending);
  // Bodies left out: every event fails to decode and is dead-lettered.
  check('headers_only', have.headers_only === true, true, false);
  // Pull requests over these limits are refused: the group stalls.
  check('max_batch', (have.max_batch ?? 0) > 0, have.max_batch, '0 (no limit)');
  check('max_expires', (have.max_expires ?? 0) > 0, seconds(have.max_expires), '0 (no limit)');
  // The server deletes an idle durable, and the group's position with it.
  check('inactive_threshold', (have.inactive_threshold ?? 0) > 0, seconds(have.inactive_threshold), '0 (never)');
  return out;
}

/**
 * Creates the group's durable consumer if it is missing. An existing one keeps its position, and
 * is compared with the configuration: every setting that can lose, drop or stall events
 * (groupDifferences) that JetStream can change in place is changed (and logged); when one cannot
 * be, nothing is changed and a GroupConfigError names every difference.
 * (`resetGroup` deletes and recreates the group to move the position.)
 */
export async function ensureGroup(
  jsm: JetStreamManager,
  o: GroupOptions,
  start: StartAt = { from: 'start' },
  log?: Logger,
): Promise<ConsumerInfo> {
  const want = desiredGroup(o, start);
  let current: ConsumerInfo;
  try {
    current = await jsm.consumers.info(o.stream, o.group);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
    return jsm.consumers.add(o.stream, want);
  }
  const differences = groupDifferences(current.config, want);
  if (differences.length === 0) return current;
  if (differences.some((d) => !d.fixedInPlace)) {
    throw new GroupConfigError(
      `consumer group ${o.group} on stream ${o.stream} does not match the configuration: ${describeDifferences(differences)}. ` +
        `JetStream cannot change some of these in place: rebuild the group (consume:earnings --group ${o.group} --replay, ` +
        `or --replay --from a time) or remove its consumer (nats consumer rm ${o.stream} ${o.group})`,
    );
  }
  const updated = await jsm.consumers.update(o.stream, o.group, {
    ack_wait: want.ack_wait,
    max_deliver: want.max_deliver,
    filter_subject: want.filter_subject,
    ...(differences.some((d) => d.field === 'filter_subject') && current.config.filter_subjects?.length ? { filter_subjects: [] } : {}),
    max_ack_pending: differences.some((d) => d.field === 'max_ack_pending') ? want.max_ack_pending : current.config.max_ack_pending,
    headers_only: false,
    max_batch: 0,
    max_expires: 0,
    inactive_threshold: 0,
  });
  log?.warn({ stream: o.stream, changed: describeDifferences(differences) }, 'consumer group settings brought back to the configuration');
  return updated;
}

/** Moves a group's position: deletes its durable consumer and creates it again at `start`. */
export async function resetGroup(jsm: JetStreamManager, o: GroupOptions, start: StartAt): Promise<ConsumerInfo> {
  await jsm.consumers.delete(o.stream, o.group).catch((err) => {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
  });
  return ensureGroup(jsm, o, start);
}
