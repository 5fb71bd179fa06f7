import { ConfigError } from '../config.ts';
import { ensureWalSlot } from '../outbox/index.ts';
import { refuseTransactionPooler } from '../db/pooler.ts';
import { refuseUndeclaredTransactionPooler } from '../db/pooler-probe.ts';
import { startStreamWatch, type StreamWatch } from '../events/stream-watch.ts';
import { resolveLogFormat } from '../logger.ts';
import type { TopicHandler } from '../messages/handler.ts';
import { TOPIC_NAMES } from '../messages/topics.ts';
import { serveWorkerMetrics } from '../metrics/worker-metrics.ts';
import { probeOutbox, type HandlerRegistry, type Worker } from '../outbox/index.ts';
import { optionalWholeNumberFlag } from '../process/flags.ts';
import { runCommand, runMain, UsageError, type Command, type CommandContext, type RunOptions } from '../process/run-main.ts';
import { appChores } from '../worker/chores.ts';
import type { HandlerDeps } from '../worker/handlers/index.ts';
import { createConfiguredWorker } from '../worker/outbox-worker.ts';
import { openWorkerResources, type WorkerResources } from '../worker/resources.ts';

/*
 * `npm run drain-outbox -- [flags]`: the outbox worker, a process of its own. Safe to stop and
 * restart at any moment: while it is down, messages wait as PENDING; a message it was holding when
 * killed comes back when its lease ends. The runner itself is src/outbox/runner/loop.ts, set up
 * for this application by ./outbox-worker.ts.
 */

const USAGE = `usage: npm run drain-outbox -- [--once | --until-empty | --list-topics] [--batch-size N] [--concurrency N]

  (none)            run until SIGTERM/SIGINT: the first finishes the messages in flight and hands
                    back the rest; a second one (or SHUTDOWN_TIMEOUT_SECONDS) stops at once
  --once            claim and process one batch, then exit
  --until-empty     process until no message is due, then exit (cron, scripts)
  --list-topics     print each registered topic with its handlers, one a line, and exit
  --batch-size N    messages per claim while the outbox is quiet (WORKER_BATCH_SIZE); a backlog
                    doubles it, claim after claim, up to WORKER_MAX_BATCH_SIZE
  --concurrency N   handlers in flight at once (WORKER_CONCURRENCY)
  --help            this text

Exit codes: 0 clean stop · 1 database unreachable or not migrated at start, or a forced stop ·
2 bad flags or configuration.`;

type Mode = 'once' | 'until-empty' | 'list-topics';
type ExtraHandlers = (deps: HandlerDeps) => TopicHandler<any>[];

/** The worker as a command; `extraHandlers` is for the test entry (test/helpers/worker-entry.ts) only. */
export function drainOutboxCommand(extraHandlers?: ExtraHandlers): Command {
  return {
    name: 'drain-outbox',
    logName: 'worker',
    usage: USAGE,
    longRunning: true,
    options: {
      once: { type: 'boolean' },
      'until-empty': { type: 'boolean' },
      'list-topics': { type: 'boolean' },
      'batch-size': { type: 'string' },
      concurrency: { type: 'string' },
    },
    run: (ctx) => drainOutbox(ctx, extraHandlers),
  };
}

/** The flags read, the handlers' resources opened: lists the topics, or runs the worker in its mode. */
async function drainOutbox(ctx: CommandContext, extraHandlers?: ExtraHandlers): Promise<number> {
  const { flags, config, logger, err } = ctx;
  const modes = (['once', 'until-empty', 'list-topics'] as const).filter((m) => flags[m]);
  if (modes.length > 1) throw new UsageError(`--${modes.join(' and --')} cannot be combined`);
  const batchSize = optionalWholeNumberFlag('batch-size', flags['batch-size'], { min: 1, max: 1000 });
  const concurrency = optionalWholeNumberFlag('concurrency', flags.concurrency, { min: 1, max: 256 }) ?? config.WORKER_CONCURRENCY;
  // The claim's planner settings and cached plan belong to a session (src/outbox/claim-connection.ts),
  // and so does LISTEN: refused here, before anything is claimed.
  if (config.DATABASE_POOLER === 'transaction') {
    throw new ConfigError([refuseTransactionPooler('the worker', 'its claim and LISTEN need a session')]);
  }
  // …and so is a transaction-mode pooler the setting does not admit to (src/db/pooler-probe.ts).
  await refuseUndeclaredTransactionPooler({
    process: 'the worker',
    connectionString: config.DATABASE_URL,
    pooler: config.DATABASE_POOLER,
    fix: 'Connect the worker to PostgreSQL directly (DATABASE_POOLER=none) or through a session-mode pool (DATABASE_POOLER=session)',
    log: logger,
  });
  // OUTBOX_WRITES=wal: the slot the API's messages wait in exists before the worker reads it (and
  // before any API may write to it: the API refuses to start without it).
  if (config.OUTBOX_WRITES === 'wal' && !flags['list-topics']) {
    const { made } = await ensureWalSlot(config.DATABASE_URL, config.OUTBOX_SLOT);
    if (made) logger.info({ slot: config.OUTBOX_SLOT }, 'made the outbox replication slot');
  }
  const resources = openWorkerResources(config, logger, concurrency, extraHandlers);
  try {
    if (modes[0] === 'list-topics') return listTopics(resources.registry, ctx);
    // Fail fast, with a line a person can act on, rather than retrying forever at start.
    await probeOutbox(resources.database.db);
    // Handlers with set-up (the events relay creates or checks its stream): a configuration
    // the server refuses is a clear error now, exit 2, rather than every message failing later.
    try {
      await resources.registry.prepare();
    } catch (e) {
      err(`drain-outbox: ${(e as Error).message}`);
      return 2;
    }
    return await runWorker(ctx, resources, modes[0], { batchSize, concurrency });
  } finally {
    await resources.close();
  }
}

/** `--list-topics`: each registered topic with its handlers, then the catalogue's topics nobody handles. */
function listTopics(registry: HandlerRegistry, { out, err }: Pick<CommandContext, 'out' | 'err'>): number {
  for (const topic of registry.topics()) {
    out(
      `${topic}: ${registry
        .handlersFor(topic)
        .map((h) => h.name)
        .join(', ')}`,
    );
  }
  const unhandled = TOPIC_NAMES.filter((t) => registry.handlersFor(t).length === 0);
  if (unhandled.length) err(`(no handler, messages stay PENDING: ${unhandled.join(', ')})`);
  return 0;
}

/** The worker (with the stream watch and the metrics port when configured) in its mode, until done or asked to stop. */
async function runWorker(
  ctx: CommandContext,
  { database, registry, webhooks }: WorkerResources,
  mode: Exclude<Mode, 'list-topics'> | undefined,
  sizes: { batchSize: number | undefined; concurrency: number },
): Promise<number> {
  const { config, logger } = ctx;
  const worker = createConfiguredWorker({
    db: database.db,
    config,
    registry,
    logger,
    ...sizes,
    chores: appChores(config),
    // A person watching a terminal (npm start) sees each message handled; JSON logs keep to progress lines.
    logEachMessage: resolveLogFormat(config.LOG_FORMAT) === 'pretty',
  });
  // Running for good with a relay: watch the stream's settings and what it holds (src/events/stream-watch.ts).
  const watch = config.NATS_URL && mode === undefined ? startStreamWatch({ config, db: database.db, logger }) : undefined;
  ctx.onForcedStop(() => {
    worker.abort();
    void webhooks.stop(0);
    void watch?.stop();
  });
  const metrics = await serveMetrics(ctx, worker, webhooks, watch, sizes.batchSize);
  try {
    const startedAt = Date.now();
    if (mode === 'once') await worker.runOnce();
    else if (mode === 'until-empty') {
      await worker.runUntilEmpty();
      await webhooks.runUntilIdle();
    } else {
      await worker.start();
      webhooks.start();
      await ctx.stopRequested;
    }
    const [summary] = await Promise.all([worker.stop(), webhooks.stop(config.SHUTDOWN_TIMEOUT_SECONDS * 1000)]);
    const seconds = (Date.now() - startedAt) / 1000;
    logger.info(
      { ...summary, seconds: Math.round(seconds * 10) / 10, perSecond: seconds > 0 ? Math.round(summary.claimed / seconds) : null },
      'outbox worker stopped',
    );
    return 0;
  } finally {
    await watch?.stop();
    await metrics?.close();
  }
}

/** The worker's /metrics on WORKER_METRICS_PORT, when it is set. */
async function serveMetrics(
  { config, logger }: CommandContext,
  worker: Worker,
  webhooks: WorkerResources['webhooks'],
  watch: StreamWatch | undefined,
  batchSize: number | undefined,
) {
  if (config.WORKER_METRICS_PORT === undefined) return undefined;
  const metrics = await serveWorkerMetrics(worker.events, {
    port: config.WORKER_METRICS_PORT,
    host: config.HOST,
    // The histogram's buckets reach the largest claim a backlog can grow to.
    maxBatchSize: Math.max(batchSize ?? config.WORKER_BATCH_SIZE, config.WORKER_MAX_BATCH_SIZE),
    webhooks: webhooks.events,
    stream: watch?.events,
  });
  logger.info({ port: metrics.port }, 'worker metrics on /metrics');
  return metrics;
}

/** The worker in-process (tests): the same flags, signals and exit codes as the process. */
export function main(opts: RunOptions & { extraHandlers?: ExtraHandlers }): Promise<number> {
  return runCommand(drainOutboxCommand(opts.extraHandlers), opts);
}

runMain(drainOutboxCommand(), import.meta.url);
