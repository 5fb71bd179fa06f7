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
import { connectNats, describeNatsFailure } from '../connection.ts';
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
import { desiredStream, ensureStream, StreamConfigError } from '../stream.ts';
import { applyEarningsEvent, clearLedger, earningsFilter } from './ledger.ts';

/*
 * `npm run consume:earnings -- [flags]`: the hosts' earnings ledger, a consumer group of the events
 * stream (EVENTS_EARNINGS_GROUP). Safe to kill at any moment: an event whose transaction did not
 * commit comes back after EVENTS_ACK_WAIT_SECONDS; one that committed is skipped by the inbox.
 *
 *   (none)           run until SIGTERM/SIGINT
 *   --until-empty    run until the group has nothing pending or unacked, then exit 0
 *   --replay         first rebuild: empty this group's ledger and inbox, restart it at the stream's
 *                    first event (stop the group's other processes first)
 *   --replay --from T  restart the group at time T (ISO 8601) keeping ledger and inbox: events
 *                    already applied are skipped, the rest applied (after restoring the database
 *                    from a backup taken at T, this brings the ledger forward exactly)
 *   --dead           list the group's open consumer dead letters and exit
 *   --replay-dead    apply the open dead letters (after fixing their cause) and exit
 *   --group NAME     another group (a second ledger beside the live one, e.g. to compare a rebuild)
 *
 * Exit codes: 0 clean stop · 1 database or NATS unreachable at start · 2 bad flags or configuration.
 */

const USAGE = `usage: npm run consume:earnings -- [--until-empty] [--replay [--from ISO-TIME]] [--dead | --replay-dead] [--group NAME]

  (none)             run until SIGTERM/SIGINT
  --until-empty      run until the group has nothing pending or unacked, then exit
  --replay           rebuild: empty this group's ledger and inbox, restart it at the stream's first event
  --replay --from T  restart the group at time T (ISO 8601), keeping ledger and inbox
  --dead             list the group's open consumer dead letters and exit
  --replay-dead      apply the open dead letters (after fixing their cause) and exit
  --group NAME       another group than EVENTS_EARNINGS_GROUP
  --help             this text

Exit codes: 0 clean stop · 1 database or NATS unreachable at start · 2 bad flags or configuration.`;

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
    from?: string;
    dead?: boolean;
    'replay-dead'?: boolean;
    group?: string;
  };
  if (values.from !== undefined && !values.replay) throw new UsageError('--from goes with --replay');
  if (values.from !== undefined && Number.isNaN(Date.parse(values.from))) throw new UsageError(`--from is not a time: "${values.from}"`);
  if (values.group !== undefined && !/^[A-Za-z0-9_-]+$/.test(values.group)) throw new UsageError('--group: letters, digits, - and _ only');
  if (values.dead && values['replay-dead']) throw new UsageError('--dead and --replay-dead cannot be combined');
  if (!config.NATS_URL) throw new ConfigError(['NATS_URL: required by the events consumer']);
  const natsUrl = config.NATS_URL;

  const group = values.group ?? config.EVENTS_EARNINGS_GROUP;
  const logger = ctx.logger.child({ group });
  const database = createDatabase(config.DATABASE_URL, { max: 4, applicationName: `stayhub-consumer-${group}` });
  const handle = applyEarningsEvent(group);
  try {
    if (values.dead) {
      for (const d of await openDeadLetters(database.db, group)) {
        out(
          `${d.message_id}\tseq ${d.stream_seq}\t${d.headers['StayHub-Topic'] ?? d.subject}\t${d.deliveries} deliveries\t${d.last_error}`,
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
        jsm = await jetstreamManager(nc);
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
      try {
        // The same stream the relay declares: whichever starts first creates it.
        await ensureStream(jsm, desiredStream(config), { log: logger });
      } catch (e) {
        if (e instanceof StreamConfigError) {
          errOut(`consume:earnings: ${e.message}`);
          return 2;
        }
        throw e;
      }
      if (values.replay) {
        const start: StartAt = values.from ? { from: 'time', time: new Date(values.from) } : { from: 'start' };
        if (start.from === 'start') {
          await withTransaction(database.db, async (tx) => {
            await clearLedger(tx, group);
            await clearInbox(tx, group);
          });
        }
        await resetGroup(jsm, groupOptions, start);
        logger.info({ from: values.from ?? 'stream start' }, 'group reset for replay');
      } else {
        await ensureGroup(jsm, groupOptions, { from: 'start' }, logger);
      }

      const metrics = createConsumerMetrics({ jsm, stream: config.EVENTS_STREAM, db: database.db, group });
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
        onOutcome: metrics.outcome,
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
      await nc.drain().catch(() => undefined);
    }
  } finally {
    await database.close();
  }
}

runMain(earningsCommand(), import.meta.url);
