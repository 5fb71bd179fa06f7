import { ConfigError } from '../config.ts';
import { createDatabase, type Db } from '../db/client.ts';
import { isTopicName, type TopicName } from '../messages/topics.ts';
import { messagesCreatedBetween, probeOutbox } from '../outbox/index.ts';
import { runCommand, runMain, UsageError, type Command, type CommandContext, type RunOptions } from '../process/run-main.ts';
import { readyCommandPublisher, type EventPublisher } from '../events/publisher.ts';
import { payloadAsRelayed, relayedTopics, relayMessage } from '../events/relay.ts';

/*
 * `npm run events:backfill -- --since T [--until T] [--topic T …] [--dry-run]`: the events of
 * outbox messages written before the relay was configured (NATS_URL unset then), published into
 * the stream now. The worker only relays what it claims, and a message that was DONE before the
 * relay existed is never claimed again.
 *
 * Each message is published by the relay's own code (relay.ts), so it carries the subject, headers,
 * body and Nats-Msg-Id (its public id) the relay would have given it. Within the stream's duplicate
 * window the server stores a message id once: a second backfill, or one overlapping what the relay
 * published, is reported as duplicates and changes nothing. Past the window a copy is stored, and
 * consumers skip it by message id (the earnings consumer's inbox does).
 *
 * One publish at a time, oldest first: the stream receives the events in the order the outbox
 * wrote them, so each key's events keep their order. A PubAck round trip each is thousands a second
 * against a nearby server, plenty for a command run once.
 */

const USAGE = `usage: npm run events:backfill -- --since ISO-TIME [--until ISO-TIME] [--topic T …] [--dry-run]

Publishes into the events stream the outbox messages written from --since until --until, whatever
their status, oldest first, each as the relay publishes it (Nats-Msg-Id = the message's public id):
for bookings made before NATS_URL was set.

  --since T    from this time, inclusive: 2027-01-01 (UTC midnight) or 2027-01-01T09:30:00Z / +02:00
  --until T    up to this time, exclusive (default: now)
  --topic T    only this topic; repeat for more (default: the relayed ones, EVENTS_TOPICS or all)
  --dry-run    count what would be published, per topic; publish nothing (needs no NATS)
  --help       this text

A message the stream already holds within its duplicate window is counted as a duplicate and not
stored again; an older one is stored again, and consumers skip it by its message id.

Exit codes: 0 every message published or already there · 1 a message failed, the database or NATS
unreachable, or stopped by a signal · 2 bad flags or configuration.`;

/** Rows read per query: a page is a few hundred kilobytes of payloads. */
const PAGE_SIZE = 500;
/** Publishes failing one after another: the server is not answering, and every further one would wait its timeout. */
const MAX_FAILURES_IN_A_ROW = 10;
const PROGRESS_EVERY_MS = 5_000;

// A date (UTC midnight, as JavaScript reads it) or a date and time with its zone: a time without a
// zone would mean the clock of whichever machine runs the command.
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}))?$/i;

function timeFlag(name: string, value: string | boolean | undefined): Date | undefined {
  if (value === undefined) return undefined;
  const text = String(value);
  const ms = ISO_TIME.test(text) ? Date.parse(text) : NaN;
  if (Number.isNaN(ms)) {
    throw new UsageError(`--${name} is not an ISO 8601 date or time with its zone: "${text}" (e.g. 2027-01-01T00:00:00Z)`);
  }
  return new Date(ms);
}

function topicsFlag(value: unknown, relayed: TopicName[]): TopicName[] {
  if (value === undefined) return relayed;
  const asked = [...new Set(value as string[])];
  for (const t of asked) {
    if (!isTopicName(t)) throw new UsageError(`--topic ${t} is not a topic; the relayed ones: ${relayed.join(', ')}`);
    if (!relayed.includes(t))
      throw new UsageError(`--topic ${t} is not relayed (EVENTS_TOPICS=${relayed.join(',')}): its consumers expect none`);
  }
  return asked as TopicName[];
}

export interface BackfillCounts {
  published: number;
  duplicates: number;
  failed: number;
}

export const backfillCommand: Command = {
  name: 'events:backfill',
  logName: 'backfill',
  usage: USAGE,
  longRunning: true,
  options: {
    since: { type: 'string' },
    until: { type: 'string' },
    topic: { type: 'string', multiple: true },
    'dry-run': { type: 'boolean' },
  },
  run: backfill,
};

async function backfill(ctx: CommandContext): Promise<number> {
  const { flags, config, logger, out, err } = ctx;
  const since = timeFlag('since', flags.since);
  if (!since) throw new UsageError('--since is required: the time of the first message to publish');
  const until = timeFlag('until', flags.until) ?? new Date();
  if (until <= since) throw new UsageError(`--until (${until.toISOString()}) must be after --since (${since.toISOString()})`);
  const topics = topicsFlag(flags.topic, relayedTopics(config));
  const dryRun = Boolean(flags['dry-run']);
  if (!dryRun && !config.NATS_URL) throw new ConfigError(['NATS_URL: required by events:backfill (the server to publish into)']);

  const database = createDatabase(config.DATABASE_URL, {
    max: 1,
    applicationName: 'stayhub-events-backfill',
    pooler: config.DATABASE_POOLER,
  });
  const window = `written from ${since.toISOString()} until ${until.toISOString()}, topics ${topics.join(', ')}`;
  try {
    await probeOutbox(database.db);
    const pages = () => messagesInWindow(database.db, { since, until, topics });
    if (dryRun) {
      out(`events:backfill: dry run, nothing published: ${await countWhatWouldBePublished(pages())}; messages ${window}`);
      return 0;
    }
    const publisher = await readyCommandPublisher(config, logger, { command: 'events:backfill', connectionName: 'stayhub-backfill', err });
    if (typeof publisher === 'number') return publisher;
    try {
      const { counts, stoppedBecause } = await publishAll(ctx, publisher, pages());
      const summary = `${counts.published} published, ${counts.duplicates} duplicates (already in the stream), ${counts.failed} failed`;
      if (stoppedBecause) {
        err(`events:backfill: ${stoppedBecause}; stopped early: ${summary}. Run the same command again to finish`);
        return 1;
      }
      out(`events:backfill: ${summary}; messages ${window}`);
      return counts.failed ? 1 : 0;
    } finally {
      await publisher.close();
    }
  } finally {
    await database.close();
  }
}

type WindowMessage = Awaited<ReturnType<typeof messagesCreatedBetween>>[number];

/** The outbox's messages of the window, in order of writing, a page at a time. */
async function* messagesInWindow(db: Db, w: { since: Date; until: Date; topics: string[] }): AsyncGenerator<WindowMessage> {
  for (let afterId = 0; ;) {
    const page = await messagesCreatedBetween(db, { ...w, afterId, limit: PAGE_SIZE });
    yield* page;
    if (page.length < PAGE_SIZE) return;
    afterId = page[page.length - 1]!.id;
  }
}

/** --dry-run: how many would be published, per topic, and how many could not be. */
async function countWhatWouldBePublished(messages: AsyncIterable<WindowMessage>): Promise<string> {
  const perTopic = new Map<string, number>();
  let invalid = 0;
  for await (const m of messages) {
    if ('error' in payloadAsRelayed(m.topic as TopicName, m.payload)) invalid++;
    else perTopic.set(m.topic, (perTopic.get(m.topic) ?? 0) + 1);
  }
  const total = [...perTopic.values()].reduce((a, b) => a + b, 0);
  const detail = [...perTopic].map(([t, n]) => `${t} ${n}`).join(', ');
  return (
    `${total} to publish${detail ? ` (${detail})` : ''}` +
    `${invalid ? `, ${invalid} whose payload does not match its topic's schema` : ''}`
  );
}

/**
 * Publishes every message as the relay would; stops early on a signal or after
 * MAX_FAILURES_IN_A_ROW failed publishes, saying why.
 */
async function publishAll(
  ctx: CommandContext,
  publisher: EventPublisher,
  messages: AsyncIterable<WindowMessage>,
): Promise<{ counts: BackfillCounts; stoppedBecause?: string }> {
  const { config, logger, isStopping } = ctx;
  const counts: BackfillCounts = { published: 0, duplicates: 0, failed: 0 };
  let inARow = 0;
  let lastProgress = Date.now();
  for await (const m of messages) {
    if (isStopping()) return { counts, stoppedBecause: 'stopped by a signal' };
    const log = logger.child({ messageId: m.publicId, topic: m.topic });
    const relayed = payloadAsRelayed(m.topic as TopicName, m.payload);
    if ('error' in relayed) {
      counts.failed++;
      log.warn({ status: m.status }, `not published: ${relayed.error}`);
      continue;
    }
    try {
      const result = await relayMessage(publisher, config, {
        messageId: m.publicId,
        topic: m.topic as TopicName,
        key: m.key,
        occurredAt: m.createdAt,
        payload: relayed.payload,
      });
      if (result.duplicate) counts.duplicates++;
      else counts.published++;
      inARow = 0;
    } catch (e) {
      counts.failed++;
      log.warn({ err: e }, 'publish failed');
      if (++inARow >= MAX_FAILURES_IN_A_ROW) {
        return { counts, stoppedBecause: `${inARow} publishes in a row failed (last: ${(e as Error).message})` };
      }
    }
    if (Date.now() - lastProgress >= PROGRESS_EVERY_MS) {
      lastProgress = Date.now();
      logger.info({ ...counts, createdAt: m.createdAt.toISOString() }, 'backfill progress');
    }
  }
  return { counts };
}

/** The backfill in-process (tests): the same flags and exit codes as the command. */
export function backfillMain(opts: RunOptions): Promise<number> {
  return runCommand(backfillCommand, opts);
}

runMain(backfillCommand, import.meta.url);
