import {
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type JetStreamManager,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { ConfigError, type Config } from '../config.ts';
import { createDatabase } from '../db/client.ts';
import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import { isTopicName, type TopicName } from '../messages/topics.ts';
import { probeOutbox } from '../outbox/index.ts';
import { runCommand, UsageError, type Command, type CommandContext, type RunOptions } from '../process/run-main.ts';
import { closeNats, connectNats, describeNatsFailure } from './connection.ts';
import { readyCommandPublisher, type EventPublisher } from './publisher.ts';
import { relayedMessages, relayedPage, type RelayedMessageRow, type RelayedRow } from './reconcile-outbox.ts';
import { payloadAsRelayed, relayMessage } from './relay.ts';
import { duplicateWindowSeconds } from './stream.ts';
import { HEADERS } from './subjects.ts';

/*
 * The outbox is the source of truth for what the stream should hold. JetStream acknowledges a
 * publish once the message is in the server's memory and its file's write buffer, not once it is
 * on disk: a node that loses power loses the last acknowledged messages, which the relay has
 * already marked relayed. Someone may also delete messages, purge the stream, or delete and
 * recreate it. Nothing in the stream tells that a message it never had is missing.
 *
 * So: every event the outbox says the relay stored since T (reconcile-outbox.ts) is looked for in
 * the stream by its Nats-Msg-Id, and one the stream lacks is published again by the relay's own
 * code (relay.ts): same subject, headers, body and Nats-Msg-Id. A consumer that already applied it
 * skips it by that id (its inbox).
 *
 * How the stream is read: the outbox's relayed events come in pages (PAGE_SIZE, by day, then id).
 * An event was stored between its message's created_at and its processed_at, so each page is
 * looked for in that span of the stream only: an ordered consumer that starts at the page's
 * first created_at, delivers headers only, and stops past its last processed_at (CLOCK_MARGIN_MS
 * either side for the clocks of PostgreSQL and nats-server). Memory holds one page's ids. What a
 * page did not find is kept (ids only: these are the missing ones, or copies an earlier run
 * republished after the span), and looked for once more in one scan from the first of them to the
 * stream's end before anything is published.
 *
 * The duplicate window: a message deleted from the stream leaves its id in the server's duplicate
 * table until the window passes. A republish inside it is answered "duplicate" and stores nothing:
 * it is counted as `inWindow`, and a run after the window republishes it (the worker's scheduled
 * run looks back further than the window for that reason). Past the window, a republish stores
 * it; a stream recreated since has no memory of the id at all.
 */

/** Relayed events per outbox page and per stream scan. */
const PAGE_SIZE = 2000;
/** Messages per pull while scanning the stream. */
const SCAN_BATCH = 1000;
/** How far the clocks of PostgreSQL and nats-server may disagree; each scan is widened by it. */
export const CLOCK_MARGIN_MS = 10_000;

export interface ReconcileCounts {
  /** Relayed events the outbox holds for the window. */
  checked: number;
  /** Found in the stream. */
  present: number;
  /** Missing, and published again. */
  republished: number;
  /**
   * Missing, but the server still remembers the id (deleted inside the duplicate window): it
   * answered "duplicate" and stored nothing. A run after the window republishes them.
   */
  inWindow: number;
  /** Missing, and could not be published (a publish error, or a payload its topic no longer accepts). */
  failed: number;
}

export interface ReconcileOptions {
  db: Db;
  /** The connection the stream is read through. */
  nc: NatsConnection;
  /** Publishes what is missing: a publisher that does not own the stream's settings. */
  publisher: EventPublisher;
  config: Config;
  log: Logger;
  /** Events processed (DONE) at or after this time… */
  since: Date;
  /** …and before this one (default: now). */
  until?: Date;
  isStopping?: () => boolean;
}

export interface ReconcileResult extends ReconcileCounts {
  /** The message ids found missing (republished or not), for the log and tests; at most 1000. */
  missingIds: string[];
  /** True when stopped before the end (a signal). */
  stopped: boolean;
}

/** Compares the stream with the outbox's relayed events since `since`, and republishes what it lacks. */
export async function reconcileStream(o: ReconcileOptions): Promise<ReconcileResult> {
  const stream = o.config.EVENTS_STREAM;
  const until = o.until ?? new Date();
  const jsm = await jetstreamManager(o.nc);
  const result: ReconcileResult = { checked: 0, present: 0, republished: 0, inWindow: 0, failed: 0, missingIds: [], stopped: false };

  // The scans stop at the stream's last message as it is now: an event the outbox calls relayed
  // was stored before this point, or is one relayed meanwhile (its republish is a duplicate).
  const endSeq = await lastSeq(jsm, stream);
  const notFound = await findMissing(o, { endSeq, until }, result);
  if (notFound === 'stopped') return { ...result, stopped: true };
  if (notFound.size === 0) return result;

  o.log.warn(
    { stream, missing: notFound.size, since: o.since.toISOString() },
    'events relayed by the outbox are missing from the stream; publishing them again',
  );
  const ids = [...notFound.values()].map((r) => r.id);
  for (let i = 0; i < ids.length; i += PAGE_SIZE) {
    for (const m of await relayedMessages(o.db, ids.slice(i, i + PAGE_SIZE))) {
      if (o.isStopping?.()) return { ...result, stopped: true };
      if (result.missingIds.length < 1000) result.missingIds.push(m.messageId);
      await republish(o, jsm, m, result);
    }
  }
  return result;
}

/**
 * The outbox's relayed events the stream does not hold, page by page, then once more to the
 * stream's end; counts `checked` and `present` on the way. 'stopped' when asked to stop.
 */
async function findMissing(
  o: ReconcileOptions,
  { endSeq, until }: { endSeq: number; until: Date },
  result: ReconcileCounts,
): Promise<Map<string, RelayedRow> | 'stopped'> {
  const scan = (wanted: Map<string, RelayedRow>, from: Date, stopAt: Date | null) =>
    scanStream(o.nc, o.config.EVENTS_STREAM, endSeq, wanted, from, stopAt);
  /** Not found in their page's span: looked for again to the stream's end, then republished. */
  const notFound = new Map<string, RelayedRow>();
  for (let after: { day: string; id: number } | null = null; ;) {
    if (o.isStopping?.()) return 'stopped';
    const page = await relayedPage(o.db, { since: o.since, until, after, limit: PAGE_SIZE });
    if (page.length === 0) break;
    after = { day: page[page.length - 1]!.day, id: page[page.length - 1]!.id };
    const wanted = new Map<string, RelayedRow>();
    for (const r of page) if (!notFound.has(r.messageId)) wanted.set(r.messageId, r);
    result.checked += wanted.size;
    const from = new Date(Math.min(...page.map((r) => r.createdAt.getTime())) - CLOCK_MARGIN_MS);
    const to = new Date(Math.max(...page.map((r) => r.processedAt.getTime())) + CLOCK_MARGIN_MS);
    const looking = wanted.size;
    await scan(wanted, from, to);
    result.present += looking - wanted.size;
    for (const [id, r] of wanted) notFound.set(id, r);
  }
  if (notFound.size > 0) {
    const from = new Date(Math.min(...[...notFound.values()].map((r) => r.processedAt.getTime())) - CLOCK_MARGIN_MS);
    const before = notFound.size;
    await scan(notFound, from, null);
    result.present += before - notFound.size;
  }
  return notFound;
}

/** Publishes one missing event again, as the relay did; counts what became of it. */
async function republish(o: ReconcileOptions, jsm: JetStreamManager, m: RelayedMessageRow, result: ReconcileCounts): Promise<void> {
  const log = o.log.child({ messageId: m.messageId, topic: m.topic });
  const relayed = isTopicName(m.topic) ? payloadAsRelayed(m.topic, m.payload) : { error: `${m.topic} is not a topic` };
  if ('error' in relayed) {
    result.failed++;
    log.error(`missing from the stream, and not published again: ${relayed.error}`);
    return;
  }
  try {
    const published = await relayMessage(o.publisher, o.config, {
      messageId: m.messageId,
      topic: m.topic as TopicName,
      key: m.key,
      occurredAt: m.createdAt,
      payload: relayed.payload,
    });
    if (!published.duplicate) {
      result.republished++;
      return;
    }
    // "Duplicate": either it was stored meanwhile (seq holds it), or it was deleted inside the
    // duplicate window and the server still remembers its id (seq holds nothing).
    const stored = await jsm.streams.getMessage(o.config.EVENTS_STREAM, { seq: published.seq }).catch(() => null);
    if (stored?.header?.get(HEADERS.msgId) === m.messageId) result.present++;
    else {
      result.inWindow++;
      log.warn(
        { seq: published.seq },
        `missing from the stream, but the server still remembers its id (duplicate window, ${duplicateWindowSeconds(o.config)} s): a run after the window publishes it again`,
      );
    }
  } catch (err) {
    result.failed++;
    log.error({ err }, 'missing from the stream, and publishing it again failed');
  }
}

async function lastSeq(jsm: JetStreamManager, stream: string): Promise<number> {
  try {
    const info = await jsm.streams.info(stream);
    return info.state.messages === 0 ? 0 : info.state.last_seq;
  } catch (err) {
    // No stream: everything relayed is missing; the publisher creates the stream again.
    if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return 0;
    throw err;
  }
}

/**
 * Reads the stream from `from` (its time) with an ordered consumer, headers only, removing from
 * `wanted` every id it meets. Stops at `endSeq`, at the stream's end, past `stopAt`, or once
 * nothing is wanted any more. The ephemeral consumer is deleted at the end.
 */
async function scanStream(
  nc: NatsConnection,
  stream: string,
  endSeq: number,
  wanted: Map<string, unknown>,
  from: Date,
  stopAt: Date | null,
): Promise<void> {
  if (endSeq === 0 || wanted.size === 0) return;
  const consumer = await jetstream(nc).consumers.get(stream, {
    deliver_policy: DeliverPolicy.StartTime,
    opt_start_time: from.toISOString(),
    headers_only: true,
  });
  const stopAtNanos = stopAt === null ? Infinity : stopAt.getTime() * 1e6;
  try {
    for (let done = false; !done;) {
      const batch = await consumer.fetch({ max_messages: SCAN_BATCH, expires: 2000 });
      let received = 0;
      for await (const m of batch) {
        received++;
        const id = m.headers?.get(HEADERS.msgId);
        if (id) wanted.delete(id);
        // Leaving the loop ends the pull (awaiting the batch's close() instead waits forever on
        // nats.js 3.3 once its last message is in hand).
        if (m.seq >= endSeq || m.info.pending === 0 || m.info.timestampNanos > stopAtNanos || wanted.size === 0) {
          done = true;
          break;
        }
      }
      // Nothing came within the pull's expiry: nothing stored at or after `from`.
      if (received === 0) done = true;
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
}

const USAGE = `usage: npm run events:reconcile -- --since T

Compares the events stream with the outbox: every event the relay stored (its outbox message DONE)
since T is looked for in the stream by its Nats-Msg-Id, and one the stream lacks is published
again, exactly as the relay published it. Prints what it checked and found.

  --since T   an ISO 8601 time with its zone (2027-01-05T09:30:00Z, or a date: UTC midnight),
              or a duration back from now: 90s, 45m, 2h, 7d
  --help      this text

A message deleted from the stream less than the duplicate window ago cannot be stored again yet
(the server still remembers its id): it is counted apart, and a run after the window stores it.

Exit codes: 0 the stream holds every event (some perhaps republished now) · 1 some could not be
republished, the database or NATS unreachable, or stopped by a signal · 2 bad flags or configuration.`;

const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}))?$/i;
const DURATION = /^(\d+)(s|m|h|d)$/;
const UNIT_SECONDS = { s: 1, m: 60, h: 3600, d: 86_400 } as const;

/** `--since`: an ISO time with its zone, or a duration back from `now`. Anything else is a UsageError. */
export function parseSince(value: string | boolean | undefined, now = new Date()): Date {
  if (value === undefined || value === true || value === '') {
    throw new UsageError('--since is required: an ISO time (2027-01-05T09:30:00Z) or a duration back from now (2h)');
  }
  const text = String(value).trim();
  const duration = DURATION.exec(text);
  if (duration) {
    const seconds = Number(duration[1]) * UNIT_SECONDS[duration[2] as keyof typeof UNIT_SECONDS];
    if (seconds === 0) throw new UsageError(`--since ${text}: a duration must be longer than 0`);
    return new Date(now.getTime() - seconds * 1000);
  }
  const ms = ISO_TIME.test(text) ? Date.parse(text) : NaN;
  if (Number.isNaN(ms)) {
    throw new UsageError(`--since is neither an ISO 8601 time with its zone nor a duration like 2h: "${text}"`);
  }
  if (ms > now.getTime()) throw new UsageError(`--since ${text} is in the future`);
  return new Date(ms);
}

/** The one line a run reports. */
export function describeCounts(c: ReconcileCounts): string {
  return (
    `${c.checked} checked, ${c.present} present, ${c.republished} republished, ` +
    `${c.inWindow} missing but inside the duplicate window (a later run republishes them), ${c.failed} could not be republished`
  );
}

export const reconcileCommand: Command = {
  name: 'events:reconcile',
  logName: 'reconcile',
  usage: USAGE,
  longRunning: true,
  options: { since: { type: 'string' } },
  run: reconcile,
};

async function reconcile(ctx: CommandContext): Promise<number> {
  const { flags, config, logger, out, err, isStopping } = ctx;
  const since = parseSince(flags.since);
  if (!config.NATS_URL) throw new ConfigError(['NATS_URL: required by events:reconcile (the server whose stream it checks)']);
  const natsUrl = config.NATS_URL;
  const database = createDatabase(config.DATABASE_URL, {
    max: 1,
    applicationName: 'stayhub-events-reconcile',
    pooler: config.DATABASE_POOLER,
  });
  try {
    await probeOutbox(database.db);
    let nc: NatsConnection;
    try {
      nc = await connectNats(natsUrl, 'stayhub-reconcile');
    } catch (e) {
      err(`events:reconcile: ${describeNatsFailure(natsUrl, e)}`);
      return 1;
    }
    const publisher = await readyCommandPublisher(config, logger, {
      command: 'events:reconcile',
      connectionName: 'stayhub-reconcile-publisher',
      err,
    });
    if (typeof publisher === 'number') {
      await closeNats(nc);
      return publisher;
    }
    try {
      const r = await reconcileStream({ db: database.db, nc, publisher, config, log: logger, since, isStopping });
      const line = `events:reconcile: ${describeCounts(r)}; events relayed since ${since.toISOString()}, stream ${config.EVENTS_STREAM}`;
      if (r.stopped) {
        err(`${line}; stopped by a signal before the end`);
        return 1;
      }
      out(line);
      return r.inWindow + r.failed > 0 ? 1 : 0;
    } finally {
      await publisher.close();
      await closeNats(nc);
    }
  } finally {
    await database.close();
  }
}

/** The command in-process (tests): the same flags and exit codes as `npm run events:reconcile`. */
export function reconcileMain(opts: RunOptions): Promise<number> {
  return runCommand(reconcileCommand, opts);
}
