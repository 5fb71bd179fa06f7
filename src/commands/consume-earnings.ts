import { ConfigError } from '../config.ts';
import { createDatabase, type Db } from '../db/client.ts';
import { runCommand, runMain, UsageError, type Command, type CommandContext, type RunOptions } from '../process/run-main.ts';
import type { Logger } from '../logger.ts';
import { closeNats, connectNats, describeNatsFailure, onceJetStreamAnswers } from '../events/connection.ts';
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, runGroup, type GroupRunOptions } from '../events/consumer.ts';
import { openDeadLetters } from '../events/dead-letters.ts';
import type { GroupOptions } from '../events/group.ts';
import { replayDeadLetters, type GroupHandler } from '../events/handle-event.ts';
import { notCaughtUp } from '../events/caught-up.ts';
import { createConsumerMetrics } from '../events/lag.ts';
import { serveMetrics } from '../metrics/metrics-server.ts';
import { streamHoldings, withRelayHistory, type StreamHoldings } from '../events/retention.ts';
import { desiredStream, ensureStream, StreamConfigError } from '../events/stream.ts';
import { askGroupLeaderToStepDown } from '../events/stuck-leader.ts';
import { startLedgerAudit } from '../events/earnings/audit.ts';
import { applyEarningsEvent, earningsFilter, rebuildLedger } from '../events/earnings/ledger.ts';
import { positionGroup, type StartOutcome, type StartRequest } from '../events/earnings/start.ts';
import { traceIdOf } from '../telemetry/tracing.ts';

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
  afterEffect?: GroupRunOptions['afterEffect'];
  /** Test hook: runs after an event's COMMIT, before its ack. */
  beforeAck?: GroupRunOptions['beforeAck'];
  /** Test hook: runs at start-up once the stream is open, before the group is positioned on it. */
  afterStreamOpened?: () => Promise<void>;
}

export type EarningsMainOptions = RunOptions & EarningsHooks;

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

interface EarningsFlags extends StartRequest {
  untilEmpty: boolean;
  dead: boolean;
  replayDead: boolean;
  group: string | undefined;
}

function readFlags(flags: CommandContext['flags']): EarningsFlags {
  const values = flags as {
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
  return {
    untilEmpty: values['until-empty'] === true,
    replay: values.replay === true,
    acceptGap: values['accept-gap'] === true,
    from: values.from,
    dead: values.dead === true,
    replayDead: values['replay-dead'] === true,
    group: values.group,
  };
}

/** What every step of one run of the command shares. */
interface Run {
  ctx: CommandContext;
  flags: EarningsFlags;
  hooks: EarningsHooks;
  natsUrl: string;
  group: string;
  logger: Logger;
  db: Db;
  handle: GroupHandler;
}

async function consume(ctx: CommandContext, hooks: EarningsHooks): Promise<number> {
  const { config } = ctx;
  const flags = readFlags(ctx.flags);
  if (!config.NATS_URL) throw new ConfigError(['NATS_URL: required by the events consumer']);
  const group = flags.group ?? config.EVENTS_EARNINGS_GROUP;
  const logger = ctx.logger.child({ group });
  const database = createDatabase(config.DATABASE_URL, {
    max: 4,
    applicationName: `stayhub-consumer-${group}`,
    pooler: config.DATABASE_POOLER,
  });
  const handle = applyEarningsEvent(group);
  try {
    if (flags.dead) return await listDeadLetters(database.db, group, ctx.out);
    if (flags.replayDead) {
      const r = await replayDeadLetters(database.db, group, handle, logger);
      ctx.out(`replayed dead letters of ${group}: ${r.applied} applied, ${r.duplicate} already applied, ${r.failed} still failing`);
      return r.failed ? 1 : 0;
    }
    return await consumeStream({ ctx, flags, hooks, natsUrl: config.NATS_URL, group, logger, db: database.db, handle });
  } finally {
    await database.close();
  }
}

/** --dead: the group's open dead letters, one a line. */
async function listDeadLetters(db: Db, group: string, out: (line: string) => void): Promise<number> {
  const dead = await openDeadLetters(db, group);
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

/** How many times start-up opens the stream again when it is deleted under it. */
const START_ATTEMPTS = 3;

/** Connects, opens the stream, positions the group, then consumes until asked to stop. */
async function consumeStream(run: Run): Promise<number> {
  const { ctx, natsUrl, logger } = run;
  const { config, err: errOut } = ctx;
  let nc;
  try {
    nc = await connectNats(natsUrl, `stayhub-consumer-${run.group}`);
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
      group: run.group,
      filterSubject: earningsFilter(config.EVENTS_SUBJECT_PREFIX),
      ackWaitSeconds: config.EVENTS_ACK_WAIT_SECONDS,
      maxDeliver: config.EVENTS_MAX_DELIVER,
      batchSize: config.EVENTS_BATCH_SIZE,
    };
    for (let attempt = 1; ; attempt++) {
      let stream;
      try {
        stream = await openStream(jsm, run);
      } catch (e) {
        if (e instanceof StreamConfigError) {
          errOut(`consume:earnings: ${e.message}`);
          return 2;
        }
        throw e;
      }
      let start;
      try {
        await run.hooks.afterStreamOpened?.();
        start = await positionGroup({ jsm, db: run.db, groupOptions, holdings: stream.holdings, logger, errOut }, run.flags);
      } catch (e) {
        // The stream deleted between opening it and positioning the group on it (an operator, or
        // the chaos run's stream-delete, just as this starts: seen in a chaos run, the consumer
        // then exited 1 "stream not found"). Open it again, as the running group recreates it
        // (src/events/consumer.ts), a few times before failing as before.
        const deleted = e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound;
        if (!deleted || attempt >= START_ATTEMPTS) throw e;
        logger.warn({ err: e, attempt }, 'the events stream was deleted while the consumer started; opening it again');
        continue;
      }
      if (start.refused) return EXIT_REFUSED;
      return await consumeUntilStopped(run, { nc, jsm, groupOptions, streamAtStart: stream.config, start });
    }
  } finally {
    await closeNats(nc);
  }
}

/** The events stream (created if missing) and what it still holds. */
async function openStream(jsm: JetStreamManager, run: Run): Promise<{ holdings: StreamHoldings; config: StreamConfig }> {
  const { config } = run.ctx;
  // The same stream the relay declares: whichever starts first creates it.
  const info = await onceJetStreamAnswers('events stream', () => ensureStream(jsm, desiredStream(config), { log: run.logger }), {
    log: run.logger,
  });
  // A stream deleted and created again starts at sequence 1 with nothing deleted: only the
  // outbox knows it once held more.
  return { holdings: await withRelayHistory(run.db, info, streamHoldings(info)), config: info.config };
}

interface Positioned {
  nc: NatsConnection;
  jsm: JetStreamManager;
  groupOptions: GroupOptions;
  streamAtStart: StreamConfig;
  start: Extract<StartOutcome, { refused: false }>;
}

/** Metrics, then the group, until a stop is asked for (or, with --until-empty, nothing is left). */
async function consumeUntilStopped(run: Run, p: Positioned): Promise<number> {
  const { config } = run.ctx;
  const { group, logger } = run;
  const metrics = createConsumerMetrics({ jsm: p.jsm, stream: config.EVENTS_STREAM, db: run.db, group });
  if (p.start.agedOut) metrics.eventsAgedOut();
  if (p.start.ledgerRebuilt) metrics.ledgerRebuilt();
  const metricsServer =
    config.EVENTS_METRICS_PORT !== undefined
      ? await serveMetrics(metrics.registry, config.EVENTS_METRICS_PORT, config.HOST, { unref: true })
      : undefined;
  if (metricsServer) logger.info({ port: metricsServer.port }, 'consumer metrics on /metrics');

  const runner = await runGroup({
    ...p.groupOptions,
    nc: p.nc,
    db: run.db,
    log: logger,
    handle: run.handle,
    streamAtStart: p.streamAtStart,
    onOutcome: metrics.outcome,
    // Deleted while running: what the lost events brought is rebuilt before the group reads again.
    onGroupLost: async (why) => {
      const rebuilt = await rebuildLedger(run.db, group);
      metrics.ledgerRebuilt();
      logger.warn({ ...rebuilt, why }, 'ledger rebuilt from the bookings table; reading the recreated group from its first event');
    },
    afterEffect: run.hooks.afterEffect,
    beforeAck: run.hooks.beforeAck,
  });
  logger.info({ stream: config.EVENTS_STREAM, filter: p.groupOptions.filterSubject }, 'earnings consumer running');
  const intervalSeconds = config.EVENTS_EARNINGS_AUDIT_INTERVAL_SECONDS;
  const audit = startLedgerAudit({
    db: run.db,
    jsm: p.jsm,
    stream: config.EVENTS_STREAM,
    group,
    intervalMs: intervalSeconds * 1000,
    // Ten audits' worth, and never under 10 minutes: an audit that failed is covered by the next.
    lookbackMs: Math.max(10 * intervalSeconds, 600) * 1000,
    log: logger,
    onCounted: metrics.missedCounted,
  });

  let stop!: () => void;
  const stopped = new Promise<void>((r) => (stop = r));
  void run.ctx.stopRequested.then(stop);
  const emptyWatch = run.flags.untilEmpty ? watchUntilEmpty(p, config.EVENTS_STREAM, group, logger, stop) : undefined;
  try {
    // runner.done rejects when the group or its stream is gone for good (GroupGoneError): exit 1.
    await Promise.race([stopped, runner.done]);
    // Caught up: one last audit, so that a run to the end leaves nothing the stream skipped.
    if (run.flags.untilEmpty && intervalSeconds > 0) await audit.runOnce();
  } finally {
    await audit.stop();
    emptyWatch?.cancel();
    await runner.stop();
    await metricsServer?.close();
  }
  logger.info('earnings consumer stopped');
  return 0;
}

/**
 * --until-empty: calls `stop` once the group has nothing pending or unacked, as told by a leader
 * that holds a current copy of the stream (src/events/caught-up.ts), twice in a row a poll apart.
 * A group led from a copy that stays behind for 10 s is asked to elect another leader (the
 * JetStream API's consumer leader stepdown): the node may not catch up while it leads.
 */
function watchUntilEmpty(
  p: Pick<Positioned, 'nc' | 'jsm'>,
  stream: string,
  group: string,
  logger: Logger,
  stop: () => void,
): { cancel(): void } {
  let poll: NodeJS.Timeout | undefined;
  let finished = false;
  let caughtUpBefore = false;
  let behindSince: number | undefined;
  const check = async () => {
    const [c, s] = await Promise.all([
      p.jsm.consumers.info(stream, group).catch(() => undefined),
      p.jsm.streams.info(stream).catch(() => undefined),
    ]);
    const why = c && s ? notCaughtUp(c, s) : 'JetStream does not answer';
    if (why === null && caughtUpBefore) return stop();
    caughtUpBefore = why === null;
    if (why?.includes('no current copy')) {
      behindSince ??= Date.now();
      if (Date.now() - behindSince >= 10_000) {
        logger.warn({ group, why }, 'the group is led from a copy of the stream that is behind: asking for another leader');
        await askGroupLeaderToStepDown(p.nc, stream, group, 5_000);
        behindSince = undefined;
      }
    } else behindSince = undefined;
    if (!finished) poll = setTimeout(() => void check(), 200);
  };
  poll = setTimeout(() => void check(), 200);
  return {
    cancel() {
      finished = true;
      clearTimeout(poll);
    },
  };
}

runMain(earningsCommand(), import.meta.url);
