import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type Config } from '../config.ts';
import { createDatabase, describeDb } from '../db/client.ts';
import { createLogger, type Logger } from '../logger.ts';
import { createMailer } from '../mail/mailer.ts';
import { TOPIC_NAMES } from '../outbox/topics.ts';
import { createPostgresSearchIndex, searchIndexOptions } from '../search/postgres-search-index.ts';
import { defaultHandlers, type HandlerDeps } from './handlers/index.ts';
import { createWorker } from './loop.ts';
import { onParentGone } from '../process/lifeline.ts';
import { HandlerRegistry, type Handler } from './registry.ts';
import { serveWorkerMetrics, type MetricsServer } from '../metrics/worker-metrics.ts'; // metrics (issue 7)

/*
 * `npm run drain-outbox -- [flags]`: the outbox worker, a process of its own. Safe to stop and
 * restart at any moment: while it is down, messages wait as PENDING; a message it was holding when
 * killed comes back when its lease ends.
 *
 *   (none)            run until SIGTERM/SIGINT
 *   --once            claim and process one batch, then exit 0
 *   --until-empty     process until no message is due, then exit 0 (cron, scripts)
 *   --list-topics     print each registered topic with its handlers, one a line, and exit 0
 *   --batch-size N    messages per claim (WORKER_BATCH_SIZE)
 *   --concurrency N   handlers in flight at once (WORKER_CONCURRENCY)
 *
 * Exit codes: 0 clean stop · 1 database unreachable (or not migrated) at start, or a forced stop
 * (second signal, SHUTDOWN_TIMEOUT_SECONDS) · 2 bad flags or configuration.
 */

const USAGE = `usage: npm run drain-outbox -- [--once | --until-empty | --list-topics] [--batch-size N] [--concurrency N]`;

export interface MainOptions {
  argv: string[];
  env?: NodeJS.ProcessEnv;
  /** Handlers added to the production list: only the test entry (test/helpers/worker-entry.ts) uses this. */
  extraHandlers?: (deps: HandlerDeps) => Handler<any>[];
  out?: (line: string) => void;
  err?: (line: string) => void;
}

interface Flags {
  mode: 'run' | 'once' | 'until-empty' | 'list-topics';
  batchSize?: number;
  concurrency?: number;
}

class UsageError extends Error {}

function parseFlags(argv: string[]): Flags {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        once: { type: 'boolean' },
        'until-empty': { type: 'boolean' },
        'list-topics': { type: 'boolean' },
        'batch-size': { type: 'string' },
        concurrency: { type: 'string' },
      },
    }));
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const modes = (['once', 'until-empty', 'list-topics'] as const).filter((m) => values[m]);
  if (modes.length > 1) throw new UsageError(`--${modes.join(' and --')} cannot be combined`);
  const int = (name: string, v: string | undefined, max: number) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!/^\d+$/.test(v) || n < 1 || n > max) throw new UsageError(`--${name} must be a whole number from 1 to ${max} (got "${v}")`);
    return n;
  };
  return {
    mode: modes[0] ?? 'run',
    batchSize: int('batch-size', values['batch-size'], 1000),
    concurrency: int('concurrency', values.concurrency, 256),
  };
}

export function buildRegistry(deps: HandlerDeps, extra?: MainOptions['extraHandlers']): HandlerRegistry {
  return new HandlerRegistry([...defaultHandlers(deps), ...(extra?.(deps) ?? [])]);
}

export async function main(opts: MainOptions): Promise<number> {
  const out = opts.out ?? ((l: string) => process.stdout.write(`${l}\n`));
  const errOut = opts.err ?? ((l: string) => process.stderr.write(`${l}\n`));

  let flags: Flags;
  let config: Config;
  try {
    flags = parseFlags(opts.argv);
    config = loadConfig(opts.env ?? process.env);
  } catch (e) {
    if (e instanceof UsageError) {
      errOut(`drain-outbox: ${e.message}\n${USAGE}`);
      return 2;
    }
    if (e instanceof ConfigError) {
      errOut(`drain-outbox: ${e.message}`);
      return 2;
    }
    throw e;
  }

  const logger: Logger = createLogger(config.LOG_LEVEL, 'worker', { format: config.LOG_FORMAT });
  const concurrency = flags.concurrency ?? config.WORKER_CONCURRENCY;
  // Claims, settles and purges need connections besides the handlers that use the database.
  const database = createDatabase(config.DATABASE_URL, {
    max: Math.max(config.DB_POOL_MAX, concurrency + 2),
    applicationName: 'stayhub-worker',
  });
  const mailer = createMailer(config);
  const searchIndex = createPostgresSearchIndex({ ...searchIndexOptions(config), applicationName: 'stayhub-worker-search' });
  const deps: HandlerDeps = { config, db: database.db, mailer, logger, searchIndex };
  const registry = buildRegistry(deps, opts.extraHandlers);
  const cleanup = async () => {
    await registry.close(); // events relay: drains its NATS connection
    mailer.close();
    await searchIndex.close();
    await database.close();
  };

  if (flags.mode === 'list-topics') {
    for (const topic of registry.topics()) {
      out(`${topic}: ${registry.handlersFor(topic).map((h) => h.name).join(', ')}`);
    }
    const unhandled = TOPIC_NAMES.filter((t) => registry.handlersFor(t).length === 0);
    if (unhandled.length) errOut(`(no handler, messages stay PENDING: ${unhandled.join(', ')})`);
    await cleanup();
    return 0;
  }

  // Fail fast, with a message a person can act on, rather than retrying forever at start.
  try {
    await database.pool.query('select 1 from outbox limit 0');
  } catch (e) {
    const code = (e as { code?: string }).code;
    errOut(
      code === '42P01'
        ? `drain-outbox: the database at ${describeDb(config.DATABASE_URL)} has no outbox table; run \`npm run migrate\` first`
        : `drain-outbox: cannot reach the database at ${describeDb(config.DATABASE_URL)}: ${(e as Error).message || code}`,
    );
    await cleanup();
    return 1;
  }

  // Handlers with set-up (the events relay creates/updates its stream): a configuration the server
  // refuses is a clear error now, exit 2, rather than every message failing later.
  try {
    await registry.prepare();
  } catch (e) {
    errOut(`drain-outbox: ${(e as Error).message}`);
    await cleanup();
    return 2;
  }

  const worker = createWorker({
    db: database.db,
    config,
    registry,
    logger,
    batchSize: flags.batchSize,
    concurrency,
  });

  // First SIGTERM/SIGINT: stop claiming, finish in-flight handlers, hand back the rest, exit 0.
  // Second one, or SHUTDOWN_TIMEOUT_SECONDS: abort handlers and exit at once; the leases of what
  // was still running bring those messages back to another worker.
  let signals = 0;
  let stopRequested: () => void = () => {};
  const stopSignal = new Promise<void>((r) => (stopRequested = r));
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals === 1) {
      logger.info({ signal, timeoutSeconds: config.SHUTDOWN_TIMEOUT_SECONDS }, 'stopping: finishing in-flight messages');
      setTimeout(() => {
        logger.error({ timeoutSeconds: config.SHUTDOWN_TIMEOUT_SECONDS }, 'shutdown timed out; exiting now');
        worker.abort();
        process.exit(1);
      }, config.SHUTDOWN_TIMEOUT_SECONDS * 1000).unref();
      stopRequested();
      void worker.stop();
    } else {
      logger.warn({ signal }, 'second signal: exiting now');
      worker.abort();
      process.exit(1);
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  // The npm (or `npm start`) that started us went away: it forwards no SIGTERM, so drain as on one.
  const lifeline = onParentGone(() => signals === 0 && onSignal('SIGTERM'), { name: 'worker' });

  const startedAt = Date.now();
  // --- metrics (issue 7): Prometheus text on WORKER_METRICS_PORT, only when it is set. -----------
  let metricsServer: MetricsServer | undefined;
  // --- end metrics
  try {
    // --- metrics (issue 7)
    if (config.WORKER_METRICS_PORT !== undefined) {
      metricsServer = await serveWorkerMetrics(worker.events, {
        port: config.WORKER_METRICS_PORT,
        host: config.HOST,
        batchSize: flags.batchSize ?? config.WORKER_BATCH_SIZE,
      });
      logger.info({ port: metricsServer.port }, 'worker metrics on /metrics');
    }
    // --- end metrics
    if (flags.mode === 'once') await worker.runOnce();
    else if (flags.mode === 'until-empty') await worker.runUntilEmpty();
    else {
      await worker.start();
      await stopSignal;
    }
    const summary = await worker.stop();
    const seconds = (Date.now() - startedAt) / 1000;
    logger.info(
      { ...summary, seconds: Math.round(seconds * 10) / 10, perSecond: seconds > 0 ? Math.round(summary.claimed / seconds) : null },
      'outbox worker stopped',
    );
    return 0;
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    lifeline.dispose();
    await metricsServer?.close(); // metrics (issue 7)
    await cleanup();
  }
}

/** True when this file is the process's entry point (not imported by a test or the test entry). */
function isEntry(): boolean {
  const entry = process.argv[1];
  if (!entry) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

if (isEntry()) {
  main({ argv: process.argv.slice(2) }).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      process.stderr.write(`drain-outbox: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
