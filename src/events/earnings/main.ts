import { ConfigError } from '../../config.ts';
import { createDatabase } from '../../db/client.ts';
import { withTransaction } from '../../db/transaction.ts';
import {
  runCommand,
  runMain,
  UsageError,
  type Command,
  type CommandContext,
  type RunOptions as MainRunOptions,
} from '../../process/run-main.ts';
import { closeNats, connectNats, describeNatsFailure, onceJetStreamAnswers } from '../connection.ts';
import { JetStreamApiError, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import {
  ensureGroup,
  jetstreamManager,
  replayDeadLetters,
  resetGroup,
  runGroup,
  type GroupOptions,
  type RunOptions,
  type StartAt,
} from '../consumer.ts';
import { openDeadLetters } from '../dead-letters.ts';
import { clearInbox } from '../inbox.ts';
import { createConsumerMetrics, serveMetrics } from '../lag.ts';
import { describeHoldings, groupMissedEvents, streamHoldings, withRelayHistory, type StreamHoldings } from '../retention.ts';
import { desiredStream, ensureStream, StreamConfigError } from '../stream.ts';
import { applyEarningsEvent, clearLedger, earningsFilter, ledgerHasHistory, rebuildLedger } from './ledger.ts';
import { traceIdOf } from '../../telemetry/tracing.ts';

/*
 * `npm run consume:earnings -- [flags]`: the hosts' earnings ledger, a consumer group of the events
 * stream (EVENTS_EARNINGS_GROUP). Safe to kill at any moment: an event whose transaction did not
 * commit comes back after EVENTS_ACK_WAIT_SECONDS; one that committed is skipped by the inbox.
 *
 *   (none)           run until SIGTERM/SIGINT
 *   --until-empty    run until the group has nothing pending or unacked, then exit 0
 *   --replay         rebuild from the stream: empty this group's ledger and inbox, restart it at the
 *                    stream's first event (stop the group's other processes first). Refused while
 *                    the stream no longer holds every event (aged out, purged or deleted): the
 *                    ledger would silently leave them out
 *   --replay --accept-gap  rebuild from the bookings table instead (retention.ts, ledger.ts:
 *                    rebuildLedger), then read the stream from its first event; what the rebuild
 *                    already counts is skipped
 *   --replay --from T  restart the group at time T (ISO 8601) keeping ledger and inbox: events
 *                    already applied are skipped, the rest applied (after restoring the database
 *                    from a backup taken at T, this brings the ledger forward exactly). Refused
 *                    when events since T are gone from the stream
 *   --dead           list the group's open consumer dead letters and exit
 *   --replay-dead    apply the open dead letters (after fixing their cause) and exit
 *   --group NAME     another group (a second ledger beside the live one, e.g. to compare a rebuild)
 *
 * A group without a durable consumer starts at the stream's first event: refused too when the
 * stream no longer holds every event (build it with --replay --accept-gap). A group whose next
 * event has aged out before it read it is reported (log, metric, dashboard) but not stopped.
 *
 * Exit codes: 0 clean stop · 1 database or NATS unreachable at start · 2 bad flags or configuration
 * · 3 refused: the stream no longer holds events this would need.
 */

const USAGE = `usage: npm run consume:earnings -- [--until-empty] [--replay [--accept-gap | --from ISO-TIME]] [--dead | --replay-dead] [--group NAME]

  (none)             run until SIGTERM/SIGINT
  --until-empty      run until the group has nothing pending or unacked, then exit
  --replay           rebuild from the stream: empty this group's ledger and inbox, restart it at the
                     stream's first event (refused when the stream no longer holds every event)
  --replay --accept-gap
                     rebuild from the bookings table, then read the stream from its first event
  --replay --from T  restart the group at time T (ISO 8601), keeping ledger and inbox
  --dead             list the group's open consumer dead letters and exit
  --replay-dead      apply the open dead letters (after fixing their cause) and exit
  --group NAME       another group than EVENTS_EARNINGS_GROUP
  --help             this text

Exit codes: 0 clean stop · 1 database or NATS unreachable at start · 2 bad flags or configuration ·
3 refused: the stream no longer holds events this would need.`;

/** The stream no longer holds what was asked for: the command says so and does nothing. */
const EXIT_REFUSED = 3;

export interface EarningsHooks {
  /** Test hook (test/helpers/earnings-entry.ts): runs inside each event's transaction, before COMMIT. */
  afterEffect?: RunOptions['afterEffect'];
  /** Test hook: runs after an event's COMMIT, before its ack. */
  beforeAck?: RunOptions['beforeAck'];
}

export type EarningsMainOptions = MainRunOptions & EarningsHooks;

/** The consumer in-process (tests and the test entry): the same flags, signals and exit codes as the process. */
export function earningsMain(opts: EarningsMainOptions): Promise<number> {
  return runCommand(earningsCommand(opts), opts);
}

export function earningsCommand(hooks: EarningsHooks = {}): Command {
  return {
    name: 'consume:earnings',
    logName: 'earnings',
    usage: USAGE,
    longRunning: true,
    options: {
      'until-empty': { type: 'boolean' },
      replay: { type: 'boolean' },
      'accept-gap': { type: 'boolean' },
      from: { type: 'string' },
      dead: { type: 'boolean' },
      'replay-dead': { type: 'boolean' },
      group: { type: 'string' },
    },
    run: (ctx) => consume(ctx, hooks),
  };
}

async function consume(ctx: CommandContext, opts: EarningsHooks): Promise<number> {
  const { config, out, err: errOut, stopRequested } = ctx;
  const values = ctx.flags as {
    'until-empty'?: boolean;
    replay?: boolean;
    'accept-gap'?: boolean;
    from?: string;
    dead?: boolean;
    'replay-dead'?: boolean;
    group?: string;
  };
  if (values.from !== undefined && !values.replay) throw new UsageError('--from goes with --replay');
  if (values['accept-gap'] && !values.replay) throw new UsageError('--accept-gap goes with --replay');
  if (values['accept-gap'] && values.from !== undefined) {
    throw new UsageError('--accept-gap rebuilds the whole ledger from the bookings table: it takes no --from');
  }
  if (values.from !== undefined && Number.isNaN(Date.parse(values.from))) throw new UsageError(`--from is not a time: "${values.from}"`);
  if (values.group !== undefined && !/^[A-Za-z0-9_-]+$/.test(values.group)) throw new UsageError('--group: letters, digits, - and _ only');
  if (values.dead && values['replay-dead']) throw new UsageError('--dead and --replay-dead cannot be combined');
  if (!config.NATS_URL) throw new ConfigError(['NATS_URL: required by the events consumer']);
  const natsUrl = config.NATS_URL;

  const group = values.group ?? config.EVENTS_EARNINGS_GROUP;
  const logger = ctx.logger.child({ group });
  const database = createDatabase(config.DATABASE_URL, {
    max: 4,
    applicationName: `stayhub-consumer-${group}`,
    pooler: config.DATABASE_POOLER,
  });
  const handle = applyEarningsEvent(group);
  try {
    if (values.dead) {
      const dead = await openDeadLetters(database.db, group);
      // An empty list must not look like a command that printed nothing because it failed.
      if (dead.length === 0) out(`none: group ${group} has no open dead letter`);
      for (const d of dead) {
        out(
          `${d.message_id}\tseq ${d.stream_seq}\t${d.headers['StayHub-Topic'] ?? d.subject}\t${d.deliveries} deliveries\t${d.last_error}` +
            // The trace the event was published in, kept in its headers (tracing on when it was).
            (traceIdOf(d.headers.traceparent) ? `\ttrace ${traceIdOf(d.headers.traceparent)}` : ''),
        );
      }
      return 0;
    }
    if (values['replay-dead']) {
      const r = await replayDeadLetters(database.db, group, handle, logger);
      out(`replayed dead letters of ${group}: ${r.applied} applied, ${r.duplicate} already applied, ${r.failed} still failing`);
      return r.failed ? 1 : 0;
    }

    let nc;
    try {
      nc = await connectNats(natsUrl, `stayhub-consumer-${group}`);
    } catch (e) {
      errOut(`consume:earnings: ${describeNatsFailure(natsUrl, e)}`);
      return 1;
    }
    try {
      let jsm;
      try {
        // A cluster electing its leaders (a node lost, or all restarted) leaves requests unanswered
        // for seconds: each start-up step waits that out (onceJetStreamAnswers), then fails as before.
        jsm = await onceJetStreamAnswers('JetStream API', () => jetstreamManager(nc), { log: logger });
      } catch (e) {
        errOut(`consume:earnings: ${describeNatsFailure(natsUrl, e)}`);
        return 1;
      }
      const groupOptions: GroupOptions = {
        stream: config.EVENTS_STREAM,
        group,
        filterSubject: earningsFilter(config.EVENTS_SUBJECT_PREFIX),
        ackWaitSeconds: config.EVENTS_ACK_WAIT_SECONDS,
        maxDeliver: config.EVENTS_MAX_DELIVER,
        batchSize: config.EVENTS_BATCH_SIZE,
      };
      let holdings: StreamHoldings;
      let streamAtStart: StreamConfig;
      try {
        // The same stream the relay declares: whichever starts first creates it.
        const info = await onceJetStreamAnswers('events stream', () => ensureStream(jsm, desiredStream(config), { log: logger }), {
          log: logger,
        });
        // A stream deleted and created again starts at sequence 1 with nothing deleted: only the
        // outbox knows it once held more.
        holdings = await withRelayHistory(database.db, info, streamHoldings(info));
        streamAtStart = info.config;
      } catch (e) {
        if (e instanceof StreamConfigError) {
          errOut(`consume:earnings: ${e.message}`);
          return 2;
        }
        throw e;
      }
      const where = `stream ${config.EVENTS_STREAM} no longer holds every event: ${describeHoldings(holdings)}`;
      let agedOut = false;
      const metricsOnStart: ((m: ReturnType<typeof createConsumerMetrics>) => void)[] = [];
      if (values.replay && values['accept-gap']) {
        const rebuilt = await rebuildLedger(database.db, group);
        await resetGroup(jsm, groupOptions, { from: 'start' });
        logger.info(
          { ...rebuilt, firstSeq: holdings.firstSeq },
          'ledger rebuilt from the bookings table; reading the stream from its first event (what the ledger counts is skipped)',
        );
      } else if (values.replay) {
        const from = values.from === undefined ? undefined : new Date(values.from);
        const refusal = replayRefusal(holdings, from);
        if (refusal) {
          errOut(
            `consume:earnings: refusing --replay${values.from ? ` --from ${values.from}` : ''} of group ${group}: ${where}. ` +
              `A ledger replayed from it would leave out what those events brought. ${refusal}`,
          );
          return EXIT_REFUSED;
        }
        const start: StartAt = from ? { from: 'time', time: from } : { from: 'start' };
        if (start.from === 'start') {
          await withTransaction(database.db, async (tx) => {
            await clearLedger(tx, group);
            await clearInbox(tx, group);
          });
        }
        await resetGroup(jsm, groupOptions, start);
        logger.info({ from: values.from ?? 'stream start' }, 'group reset for replay');
      } else {
        const exists = await onceJetStreamAnswers('consumer group', () => groupExists(jsm, config.EVENTS_STREAM, group), { log: logger });
        if (!exists && (await ledgerHasHistory(database.db, group))) {
          // The group counted events before, and its durable consumer is gone: its stream or the
          // durable was deleted while no process of it ran. Events it had not read may have gone
          // with them, and a new stream starts at 1, so nothing else would tell. The ledger is
          // derived data: rebuilt from the bookings table, then the stream is read from its start.
          const rebuilt = await rebuildLedger(database.db, group);
          metricsOnStart.push((m) => m.ledgerRebuilt());
          logger.warn(
            { ...rebuilt, firstSeq: holdings.firstSeq },
            `group ${group} has a ledger but no durable consumer on stream ${config.EVENTS_STREAM} (the stream or the group ` +
              'was deleted): events it had not read may be gone. Ledger rebuilt from the bookings table; reading the stream from its first event',
          );
        } else if (!holdings.complete && !exists) {
          errOut(
            `consume:earnings: refusing to start group ${group}: it has no durable consumer on the stream, and a new one ` +
              `starts at the stream's first event, but ${where}. Build its ledger from the bookings table, then read the ` +
              `stream from there: --replay --accept-gap.`,
          );
          return EXIT_REFUSED;
        }
        const info = await onceJetStreamAnswers('consumer group', () => ensureGroup(jsm, groupOptions, { from: 'start' }, logger), {
          log: logger,
        });
        agedOut = groupMissedEvents(info, holdings);
        if (agedOut) {
          logger.error(
            {
              firstSeq: holdings.firstSeq,
              firstAt: holdings.firstAt,
              delivered: info.delivered.stream_seq,
              ackFloor: info.ack_floor.stream_seq,
            },
            `group ${group} lost events: some it had not read are gone from the stream (${describeHoldings(holdings)}), and ` +
              'its ledger misses what they brought. Rebuild it from the bookings table: stop its processes, then ' +
              'consume:earnings --replay --accept-gap',
          );
        }
      }

      const metrics = createConsumerMetrics({ jsm, stream: config.EVENTS_STREAM, db: database.db, group });
      if (agedOut) metrics.eventsAgedOut();
      for (const f of metricsOnStart) f(metrics);
      const metricsServer =
        config.EVENTS_METRICS_PORT !== undefined
          ? await serveMetrics(metrics.registry, config.EVENTS_METRICS_PORT, config.HOST)
          : undefined;
      if (metricsServer) logger.info({ port: metricsServer.port }, 'consumer metrics on /metrics');

      const runner = await runGroup({
        ...groupOptions,
        nc,
        db: database.db,
        log: logger,
        handle,
        streamAtStart,
        onOutcome: metrics.outcome,
        // Deleted while running: what the lost events brought is rebuilt before the group reads again.
        onGroupLost: async (why) => {
          const rebuilt = await rebuildLedger(database.db, group);
          metrics.ledgerRebuilt();
          logger.warn({ ...rebuilt, why }, 'ledger rebuilt from the bookings table; reading the recreated group from its first event');
        },
        afterEffect: opts.afterEffect,
        beforeAck: opts.beforeAck,
      });
      logger.info({ stream: config.EVENTS_STREAM, filter: groupOptions.filterSubject }, 'earnings consumer running');

      let stop!: () => void;
      const stopped = new Promise<void>((r) => (stop = r));
      void stopRequested.then(stop);
      let poll: NodeJS.Timeout | undefined;
      let finished = false;
      if (values['until-empty']) {
        const check = async () => {
          const c = await jsm.consumers.info(config.EVENTS_STREAM, group).catch(() => undefined);
          if (c && c.num_pending === 0 && c.num_ack_pending === 0) stop();
          else if (!finished) poll = setTimeout(() => void check(), 200);
        };
        poll = setTimeout(() => void check(), 200);
      }
      try {
        // runner.done rejects when the group or its stream is gone for good (GroupGoneError): exit 1.
        await Promise.race([stopped, runner.done]);
      } finally {
        finished = true;
        clearTimeout(poll);
        await runner.stop();
        await metricsServer?.close();
      }
      logger.info('earnings consumer stopped');
      return 0;
    } finally {
      await closeNats(nc);
    }
  } finally {
    await database.close();
  }
}

/**
 * Why a replay from the stream cannot be trusted (and what to run instead), or undefined when the
 * stream holds every event it needs: all of them for a full replay, all since `from` otherwise.
 * Deleted events could be anywhere: any of them refuses a replay from a time as well.
 */
function replayRefusal(h: StreamHoldings, from: Date | undefined): string | undefined {
  const sinceFrom =
    from !== undefined &&
    h.deleted === 0 &&
    (h.recreated === undefined || h.recreated.at <= from) &&
    (h.firstSeq <= 1 || (h.firstAt !== null && h.firstAt <= from));
  if (h.complete || sinceFrom) return undefined;
  const keep =
    h.deleted === 0 && h.firstAt !== null
      ? `or keep the ledger and read again only what the stream holds (--replay --from ${h.firstAt.toISOString()})`
      : 'or keep the ledger as it is (start without --replay)';
  return `Either rebuild it from the bookings table instead (--replay --accept-gap), ${keep}.`;
}

async function groupExists(jsm: JetStreamManager, stream: string, group: string): Promise<boolean> {
  return jsm.consumers.info(stream, group).then(
    () => true,
    (err: unknown) => {
      if (err instanceof JetStreamApiError && err.code === 10014) return false; // consumer not found
      throw err;
    },
  );
}

runMain(earningsCommand(), import.meta.url);
