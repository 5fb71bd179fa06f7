import { ConfigError } from '../config.ts';
import { createDatabase } from '../db/client.ts';
import { refuseTransactionPooler } from '../db/pooler.ts';
import { resolveLogFormat } from '../logger.ts';
import { createMailer } from '../mail/mailer.ts';
import { serveWorkerMetrics } from '../metrics/worker-metrics.ts';
import type { Handler } from '../messages/handler.ts';
import { TOPIC_NAMES } from '../messages/topics.ts';
import { HandlerRegistry, probeOutbox } from '../outbox/index.ts';
import { optionalWholeNumberFlag } from '../process/flags.ts';
import { runCommand, runMain, UsageError, type Command, type RunOptions } from '../process/run-main.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../search/postgres-search-index.ts';
import { createWebhookSender } from '../webhooks/delivery/sender.ts';
import { startStreamWatch } from '../events/stream-watch.ts';
import { appChores } from './chores.ts';
import { defaultHandlers, type HandlerDeps } from './handlers/index.ts';
import { createWorker } from './outbox-worker.ts';

/*
 * `npm run drain-outbox -- [flags]`: the outbox worker, a process of its own. Safe to stop and
 * restart at any moment: while it is down, messages wait as PENDING; a message it was holding when
 * killed comes back when its lease ends. The runner itself is src/outbox/runner/worker.ts, set up
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

/** The worker as a command; `extraHandlers` is for the test entry (test/helpers/worker-entry.ts) only. */
export function drainOutboxCommand(extraHandlers?: (deps: HandlerDeps) => Handler<any>[]): Command {
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
    async run({ flags, config, logger, out, err, stopRequested, onForcedStop }) {
      const modes = (['once', 'until-empty', 'list-topics'] as const).filter((m) => flags[m]);
      if (modes.length > 1) throw new UsageError(`--${modes.join(' and --')} cannot be combined`);
      const batchSize = optionalWholeNumberFlag('batch-size', flags['batch-size'], { min: 1, max: 1000 });
      const concurrency = optionalWholeNumberFlag('concurrency', flags.concurrency, { min: 1, max: 256 }) ?? config.WORKER_CONCURRENCY;
      // The claim's planner settings and cached plan belong to a session (src/outbox/claim-connection.ts),
      // and so does LISTEN: refused here, before anything is claimed.
      if (config.DATABASE_POOLER === 'transaction') {
        throw new ConfigError([refuseTransactionPooler('the worker', 'its claim and LISTEN need a session')]);
      }

      // Claims, settles and purges need connections besides the handlers that use the database.
      const database = createDatabase(config.DATABASE_URL, {
        max: Math.max(config.DB_POOL_MAX, concurrency + 2),
        applicationName: 'stayhub-worker',
        pooler: config.DATABASE_POOLER,
      });
      const mailer = createMailer(config);
      const searchIndex = createPostgresSearchIndex({ ...searchIndexOptions(config), applicationName: 'stayhub-worker-search' });
      // Webhooks to hosts' systems: a sender loop of its own beside the outbox runner (src/webhooks/delivery/).
      const webhooks = createWebhookSender({ db: database.db, pool: database.pool, config, logger });
      const deps: HandlerDeps = { config, db: database.db, mailer, logger, searchIndex, webhooks };
      const registry = new HandlerRegistry([...defaultHandlers(deps), ...(extraHandlers?.(deps) ?? [])]);
      try {
        if (modes[0] === 'list-topics') {
          for (const topic of registry.topics())
            out(
              `${topic}: ${registry
                .handlersFor(topic)
                .map((h) => h.name)
                .join(', ')}`,
            );
          const unhandled = TOPIC_NAMES.filter((t) => registry.handlersFor(t).length === 0);
          if (unhandled.length) err(`(no handler, messages stay PENDING: ${unhandled.join(', ')})`);
          return 0;
        }

        // Fail fast, with a line a person can act on, rather than retrying forever at start.
        await probeOutbox(database.db);
        // Handlers with set-up (the events relay creates or checks its stream): a configuration
        // the server refuses is a clear error now, exit 2, rather than every message failing later.
        try {
          await registry.prepare();
        } catch (e) {
          err(`drain-outbox: ${(e as Error).message}`);
          return 2;
        }

        const worker = createWorker({
          db: database.db,
          config,
          registry,
          logger,
          batchSize,
          concurrency,
          chores: appChores(config),
          // A person watching a terminal (npm start) sees each message handled; JSON logs keep to progress lines.
          logEachMessage: resolveLogFormat(config.LOG_FORMAT) === 'pretty',
        });
        // Running for good with a relay: watch the stream's settings and what it holds (src/events/stream-watch.ts).
        const watch = config.NATS_URL && modes.length === 0 ? startStreamWatch({ config, db: database.db, logger }) : undefined;
        onForcedStop(() => {
          worker.abort();
          void webhooks.stop(0);
          void watch?.stop();
        });
        const metrics =
          config.WORKER_METRICS_PORT === undefined
            ? undefined
            : await serveWorkerMetrics(worker.events, {
                port: config.WORKER_METRICS_PORT,
                host: config.HOST,
                // The histogram's buckets reach the largest claim a backlog can grow to.
                maxBatchSize: Math.max(batchSize ?? config.WORKER_BATCH_SIZE, config.WORKER_MAX_BATCH_SIZE),
                webhooks: webhooks.events,
                stream: watch?.events,
              });
        if (metrics) logger.info({ port: metrics.port }, 'worker metrics on /metrics');
        try {
          const startedAt = Date.now();
          if (modes[0] === 'once') await worker.runOnce();
          else if (modes[0] === 'until-empty') {
            await worker.runUntilEmpty();
            await webhooks.runUntilIdle();
          } else {
            await worker.start();
            webhooks.start();
            await stopRequested;
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
      } finally {
        await registry.close(); // events relay: drains its NATS connection
        mailer.close();
        await searchIndex.close();
        await database.close();
      }
    },
  };
}

/** The worker in-process (tests): the same flags, signals and exit codes as the process. */
export function main(opts: RunOptions & { extraHandlers?: (deps: HandlerDeps) => Handler<any>[] }): Promise<number> {
  return runCommand(drainOutboxCommand(opts.extraHandlers), opts);
}

runMain(drainOutboxCommand(), import.meta.url);
