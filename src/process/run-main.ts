import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ConfigError, loadConfig, type Config } from '../config.ts';
import { describeDb } from '../db/client.ts';
import { isDatabaseUnavailable } from '../db/pg-errors.ts';
import { createLogger, type Logger } from '../logger.ts';
import { registerOutboxHooks } from '../outbox/index.ts';
import { onParentGone } from './lifeline.ts';
import { startProcessTelemetry } from './telemetry.ts';

/*
 * One way to run a process. Every entry point (the API, the worker, the consumer, each script) is
 * a `Command` run by `runMain`, so all of them behave alike:
 *
 *   --help / -h       prints the usage on stdout, exit 0 (before anything else is read)
 *   a bad flag        one line naming it, then the usage, on stderr: exit 2
 *   a bad setting     one line naming each bad variable (ConfigError), no stack trace: exit 2
 *   no database       "cannot reach the database at host:port/db: <reason>" (or "not migrated"): exit 1
 *   long-running      the first SIGTERM/SIGINT (or the npm that started it going away: lifeline.ts)
 *                     asks it to stop: `ctx.stopRequested` resolves, it finishes what is in hand and
 *                     returns. A second signal, or SHUTDOWN_TIMEOUT_SECONDS, stops it at once
 *                     (`ctx.onForcedStop` hooks run first): exit 1
 *   done              once `run` has returned, the process exits with its code within
 *                     EXIT_GRACE_MS (and never after the shutdown deadline): a connection or timer
 *                     left open (a NATS client reconnecting to a server that is gone) must not
 *                     keep a stopped process alive
 *   logs              pino with LOG_LEVEL and LOG_FORMAT, named after the command
 *   traces            with OTEL_TRACES_EXPORTER set, the OpenTelemetry SDK (src/telemetry/) from
 *                     before the command runs until after it returned (its last spans flushed)
 *   the database      the outbox's hooks registered with src/db before the command runs: a write
 *                     that finds its day missing is repaired and retried, migrate makes the days
 *                     ahead (src/outbox/database-hooks.ts)
 *
 * (graphile-worker's CLI and close-with-grace are the models.)
 */

export class UsageError extends Error {}

export interface CommandContext {
  flags: Record<string, string | boolean | undefined>;
  positionals: string[];
  config: Config;
  logger: Logger;
  // Functions, not methods: a command takes them out of the context (`{ out, err }`).
  out: (line: string) => void;
  err: (line: string) => void;
  /**
   * Resolves once the process is asked to stop (long-running commands), with why ('SIGTERM',
   * 'SIGINT', 'npm (our parent) exited'): finish what is in hand, then return.
   */
  stopRequested: Promise<string>;
  isStopping: () => boolean;
  /**
   * Work to abort when the process must stop at once (second signal, shutdown timeout); it exits 1
   * once these hooks have returned (a promise is waited for, at most FORCED_STOP_GRACE_MS).
   */
  onForcedStop: (fn: () => void | Promise<unknown>) => void;
}

export interface Command {
  /** As a person types it: 'drain-outbox', 'outbox:stats'. Starts every error line. */
  name: string;
  /** The whole usage text: a `usage: npm run …` line, then one line per flag. */
  usage: string;
  options?: ParseArgsConfig['options'];
  allowPositionals?: boolean;
  /** Signals and the lifeline stop it gracefully through `stopRequested` (default: a signal ends it as usual). */
  longRunning?: boolean;
  /** The logger's `name` (default: `name`). */
  logName?: string;
  /** False: never traced, whatever OTEL_TRACES_EXPORTER says (`npm start`, a supervisor: its children are). */
  traced?: boolean;
  /** How long a graceful stop may take before it is forced (default SHUTDOWN_TIMEOUT_SECONDS). */
  shutdownTimeoutSeconds?(config: Config): number;
  run(ctx: CommandContext): Promise<number>;
}

export interface RunOptions {
  argv: string[];
  env?: NodeJS.ProcessEnv;
  out?: (line: string) => void;
  err?: (line: string) => void;
  /** Exits the process on a forced stop (default true; tests running a command in-process turn it off). */
  exitOnForcedStop?: boolean;
  /**
   * The command is this process (runMain): once it has returned, the process exits with its code
   * even if something it left open would keep it alive (default false: in-process callers go on).
   */
  exitWhenDone?: boolean;
}

/** Runs `command` and resolves with its exit code. Never rejects: an unexpected error is one line and exit 1. */
export async function runCommand(command: Command, opts: RunOptions): Promise<number> {
  const out = opts.out ?? ((l: string) => process.stdout.write(`${l}\n`));
  const err = opts.err ?? ((l: string) => process.stderr.write(`${l}\n`));
  const say = (line: string) => err(`${command.name}: ${line}`);

  const parsed = parseCommandLine(command, opts.argv);
  if ('exit' in parsed) {
    if (parsed.exit === 0) out(command.usage);
    else say(`${parsed.error}\n${command.usage}`);
    return parsed.exit;
  }
  const { flags, positionals } = parsed;

  let config: Config;
  try {
    config = loadConfig(opts.env ?? process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      say(`invalid configuration: ${e.problems.join('; ')}`);
      return 2;
    }
    throw e;
  }
  const telemetry = command.traced === false ? undefined : await startProcessTelemetry(config, command.logName ?? command.name);
  const logger = createLogger(config.LOG_LEVEL, command.logName ?? command.name, { format: config.LOG_FORMAT });
  for (const line of config.deprecations) logger.warn(line);
  registerOutboxHooks();

  const stop = new StopControl(command, config, logger, opts.exitOnForcedStop ?? true);
  let code = 1;
  try {
    code = await command.run({
      flags,
      positionals,
      config,
      logger,
      out,
      err,
      stopRequested: stop.requested,
      isStopping: () => stop.stopping,
      onForcedStop: (fn) => stop.forcedHooks.push(fn),
    });
    return code;
  } catch (e) {
    if (e instanceof UsageError) {
      say(`${e.message}\n${command.usage}`);
      return (code = 2);
    }
    if (e instanceof ConfigError) {
      say(`invalid configuration: ${e.problems.join('; ')}`);
      return (code = 2);
    }
    say(describeStartFailure(e, config));
    logger.debug({ err: e }, 'command failed');
    return (code = 1);
  } finally {
    stop.dispose();
    await telemetry?.shutdown();
    if (opts.exitWhenDone) stop.exitSoon(code);
  }
}

/**
 * The flags, or how to exit: 0 for --help / -h (print the usage), 2 for a flag the command does not
 * know, a flag without its value or a stray argument (`error` says which, in one line).
 */
export function parseCommandLine(
  command: Pick<Command, 'options' | 'allowPositionals'>,
  argv: string[],
): { flags: CommandContext['flags']; positionals: string[] } | { exit: 0 } | { exit: 2; error: string } {
  if (argv.includes('--help') || argv.includes('-h')) return { exit: 0 };
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      options: command.options ?? {},
      strict: true,
      allowPositionals: command.allowPositionals ?? false,
    });
    return { flags: values as CommandContext['flags'], positionals };
  } catch (e) {
    return { exit: 2, error: describeParseError(e) };
  }
}

/** parseArgs' errors in one line (they otherwise carry advice on positionals after `--`). */
function describeParseError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const unknown = /^Unknown option '([^']+)'/.exec(message);
  if (unknown) return `unknown flag ${unknown[1]}`;
  const positional = /^Unexpected argument '([^']*)'/.exec(message);
  if (positional) return `unexpected argument '${positional[1]}' (this command takes flags only)`;
  return message.split('\n')[0]!;
}

/** Signals, the lifeline and the shutdown timeout of a long-running command. */
class StopControl {
  stopping = false;
  readonly requested: Promise<string>;
  readonly forcedHooks: (() => void | Promise<unknown>)[] = [];
  private resolve!: (reason: string) => void;
  private readonly dispose_: (() => void)[] = [];
  /** When a requested stop must be over (ms since the epoch); undefined while none was requested. */
  private deadline?: number;

  constructor(
    private readonly command: Command,
    private readonly config: Config,
    private readonly logger: Logger,
    private readonly exitOnForcedStop: boolean,
  ) {
    this.requested = new Promise((r) => (this.resolve = r));
    if (!command.longRunning) return;
    const onSignal = (signal: NodeJS.Signals) => this.request(signal);
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    // The npm (or `npm start`) that started us went away: it forwards no SIGTERM, so stop as on one.
    const lifeline = onParentGone(() => this.stopping || this.request('npm (our parent) exited'), {
      name: command.logName ?? command.name,
    });
    this.dispose_.push(() => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      lifeline.dispose();
    });
  }

  private request(reason: string): void {
    if (this.stopping) {
      this.logger.warn({ signal: reason }, 'second signal: exiting now');
      this.force();
      return;
    }
    this.stopping = true;
    const timeoutSeconds = this.command.shutdownTimeoutSeconds?.(this.config) ?? this.config.SHUTDOWN_TIMEOUT_SECONDS;
    this.logger.info({ signal: reason, timeoutSeconds }, 'stopping: finishing what is in hand');
    this.deadline = Date.now() + timeoutSeconds * 1000;
    const timer = setTimeout(() => {
      this.logger.error({ timeoutSeconds }, 'shutdown timed out; exiting now');
      this.force();
    }, timeoutSeconds * 1000);
    timer.unref();
    this.dispose_.push(() => clearTimeout(timer));
    this.resolve(reason);
  }

  private force(): void {
    const pending = this.forcedHooks.map(async (fn) => fn());
    const exit = () => {
      if (this.exitOnForcedStop) process.exit(1);
    };
    // A hook that hangs must not keep a process that was told to stop now.
    setTimeout(exit, FORCED_STOP_GRACE_MS).unref();
    void Promise.allSettled(pending).then(exit);
  }

  dispose(): void {
    for (const d of this.dispose_.splice(0)) d();
  }

  /**
   * The command returned `code`: exit with it once what is left of the event loop has had
   * EXIT_GRACE_MS (a log transport's last lines), and no later than the shutdown deadline. A
   * process that is still alive then is held by something its command forgot to close; it is told
   * in the log, since that is a bug to fix.
   */
  exitSoon(code: number): void {
    const at = Math.min(Date.now() + EXIT_GRACE_MS, this.deadline ?? Infinity);
    setTimeout(
      () => {
        this.logger.error({ exitCode: code }, 'still running after the command returned (an open connection or timer): exiting now');
        process.exit(code);
      },
      Math.max(0, at - Date.now()),
    ).unref();
  }
}

/** How long a process whose command has returned may take to exit on its own (see exitSoon). */
const EXIT_GRACE_MS = 2_000;

/** How long a forced stop waits for its hooks (stopping an embedded PostgreSQL) before exiting anyway. */
const FORCED_STOP_GRACE_MS = 5_000;

/**
 * What keeps this configuration from the database besides it being down or away (which
 * isDatabaseUnavailable knows): a host name that does not resolve, a refused login, no such database.
 */
const CANNOT_CONNECT = new Set(['ENOTFOUND', '28P01', '28000', '3D000']);

/** One line for an error that ended a command: the database's state in words a person can act on. */
export function describeStartFailure(e: unknown, config: Pick<Config, 'DATABASE_URL'>): string {
  // drizzle wraps the driver's error (DrizzleQueryError): the pg error, with its code, is the cause.
  let err = e as { code?: string; message?: string; cause?: unknown; errors?: { code?: string; message?: string }[] };
  while (err && !err.code && !err.errors && err.cause) err = err.cause as typeof err;
  // node-postgres reports a refused connection to a host with two addresses as an AggregateError.
  const code = err?.code ?? err?.errors?.[0]?.code;
  const reason = (err?.message || err?.errors?.[0]?.message || code || String(e)).split('\n')[0];
  const where = describeDb(config.DATABASE_URL);
  if (code === '42P01') return `the database at ${where} is not migrated (${reason}); run \`npm run migrate\` first`;
  // Down, refused, or gone under the command (a restart, pg_terminate_backend): one state for a
  // person, and for the process's manager, which starts it again.
  if ((code && CANNOT_CONNECT.has(code)) || isDatabaseUnavailable(err?.errors?.[0] ?? e)) {
    return `cannot reach the database at ${where}: ${reason}`;
  }
  return reason ?? 'failed';
}

/** True when `moduleUrl` is the process's entry point (not a module a test or another entry imported). */
export function isEntry(moduleUrl: string): boolean {
  const entry = process.argv[1];
  if (!entry) return false;
  try {
    return moduleUrl === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

/** Runs `command` as this process when `moduleUrl` is the entry point, and sets the exit code. */
export function runMain(command: Command, moduleUrl: string): void {
  if (!isEntry(moduleUrl)) return;
  void runCommand(command, { argv: process.argv.slice(2), exitWhenDone: true }).then((code) => {
    process.exitCode = code;
  });
}
