import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { EMBEDDED_DEFAULTS, type Config } from '../config.ts';
import { lockDataDir } from '../process/data-dir-lock.ts';
import { EmbeddedPostgres, embeddedDataDir, ensureDatabase, PortTakenError } from '../db/embedded.ts';
import { runMigrations } from '../db/migrate.ts';
import { ensureWalSlot } from '../outbox/index.ts';
import { runMain, type Command, type CommandContext } from '../process/run-main.ts';
import { describeTraceDestination } from '../process/telemetry.ts';
import { announceWhenReady, childLogEnv } from '../process/start-console.ts';

/*
 * `npm start`: the whole system on one machine. Starts the embedded PostgreSQL (unless
 * DATABASE_URL points elsewhere), applies the migrations, then runs the API and the outbox
 * worker as child processes with prefixed logs, and with NATS_URL set the earnings consumer too
 * (the worker then relays events into JetStream, and the consumer reads them back). Ctrl-C stops
 * the consumer, then the worker (it finishes its in-flight messages), then the API (it finishes
 * its requests), then Postgres. A second Ctrl-C stops everything at once. SIGTERM does the same,
 * and so does the exit of the npm that ran us (npm passes no SIGTERM on: src/process/lifeline.ts).
 */

// The repository's root (dist/ when built): the children's entries are named from it.
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const say = (msg: string) => process.stdout.write(`[start] ${msg}\n`);

// Built (`npm run build`: dist/src/commands/start.js) the children are the built JavaScript too.
const built = import.meta.url.endsWith('.js');

function run(name: string, entry: string, env: NodeJS.ProcessEnv): ChildProcess {
  // Own process group: a terminal's Ctrl-C reaches only this supervisor, which stops the
  // children in order. `node --import tsx` (not `npx tsx`) so the signal reaches the real process.
  const args = built ? [entry.replace(/\.ts$/, '.js')] : ['--import', 'tsx', entry];
  const child = spawn(process.execPath, args, {
    cwd: root,
    env,
    detached: true,
    // The IPC channel is a lifeline: if this supervisor dies, the children see it close and stop.
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  for (const stream of [child.stdout!, child.stderr!]) {
    readline.createInterface({ input: stream }).on('line', (line) => process.stdout.write(`[${name}] ${line}\n`));
  }
  return child;
}

function stopChild(child: ChildProcess, name: string, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      say(`${name} did not stop within ${timeoutMs} ms; killing it`);
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

const USAGE = `usage: npm start

Starts the embedded PostgreSQL (unless DATABASE_URL is set), applies the migrations, then runs the
API and the outbox worker, and with NATS_URL set the earnings consumer (nats-server must be
running). Ctrl-C (or SIGTERM) stops the consumer, then the worker, then the API, then PostgreSQL;
a second Ctrl-C stops everything at once.`;

/** The children in the order they are stopped, each with how the stop line names it. */
interface Child {
  name: string;
  label: string;
  child: ChildProcess;
}

interface Embedded {
  postgres: EmbeddedPostgres;
  dataDir: string;
  where: string;
}

/**
 * The product's persistent embedded PostgreSQL (its data kept between runs), not started yet;
 * `where`: its data folder as the start-up line names it.
 */
function embeddedServer(config: Config): Embedded {
  const { dataDir, unreachable } = embeddedDataDir({ root, configured: config.EMBEDDED_PG_DIR });
  if (unreachable) say(`the "postgres" user cannot reach ${unreachable} (a private folder): PostgreSQL keeps its data in ${dataDir}`);
  const postgres = new EmbeddedPostgres({
    dataDir,
    port: config.EMBEDDED_PG_PORT,
    user: EMBEDDED_DEFAULTS.user,
    password: EMBEDDED_DEFAULTS.password,
    // OUTBOX_WRITES=wal reads the API's messages back through logical decoding (ADR 0056).
    ...(config.OUTBOX_WRITES === 'wal' ? { settings: { wal_level: 'logical' } } : {}),
  });
  return { postgres, dataDir, where: unreachable ? dataDir : config.EMBEDDED_PG_DIR };
}

/** Creates the cluster if it is new, starts it and makes the database, unless a stop came in meanwhile. */
async function startEmbedded(
  { postgres, where }: { postgres: EmbeddedPostgres; where: string },
  config: Config,
  isStopping: () => boolean,
): Promise<void> {
  if (await postgres.initialise()) say(`created a new cluster in ${where}`);
  if (!isStopping()) await postgres.start();
  if (!isStopping()) {
    await ensureDatabase(postgres.url, EMBEDDED_DEFAULTS.database);
    say(`embedded PostgreSQL listening on 127.0.0.1:${config.EMBEDDED_PG_PORT}`);
  }
}

/** Starts the consumer (with NATS_URL), the worker and the API, listed in `children` in the order they stop; returns the API's process. */
function startChildren(config: Config, children: Child[]): ChildProcess {
  const traces = describeTraceDestination(config);
  if (traces) say(`traces go to ${traces} (services stayhub-api, stayhub-worker${config.NATS_URL ? ', stayhub-earnings' : ''})`);
  // STAYHUB_SUPERVISED: the children treat the IPC channel below as their lifeline (src/process/lifeline.ts).
  const env = { ...process.env, DATABASE_URL: config.DATABASE_URL, STAYHUB_SUPERVISED: '1', ...childLogEnv(config) };
  // Stopped in this order. The consumer first: it only reads what the worker relays, and stopped
  // first it acks what it applied while the stream is still fed. The worker before the API: its
  // handlers may still call the API's database.
  if (config.NATS_URL) {
    children.push({ name: 'earnings', label: 'the earnings consumer', child: run('earnings', 'src/commands/consume-earnings.ts', env) });
  }
  children.push({ name: 'worker', label: 'the worker', child: run('worker', 'src/commands/drain-outbox.ts', env) });
  const api = run('api', 'src/commands/api.ts', env);
  children.push({ name: 'api', label: 'the API', child: api });
  return api;
}

export const startCommand: Command = {
  name: 'start',
  usage: USAGE,
  longRunning: true,
  // A supervisor: the processes it starts trace themselves.
  traced: false,
  // The consumer (with NATS_URL), the worker, then the API, each within its own timeout, then PostgreSQL.
  shutdownTimeoutSeconds: (config) => (config.NATS_URL ? 3 : 2) * (config.SHUTDOWN_TIMEOUT_SECONDS + 5) + 10,
  async run(ctx) {
    const { config } = ctx;
    const embedded = config.usesEmbeddedDatabase ? embeddedServer(config) : undefined;
    // One `npm start` per data folder, taken before anything touches it: a second start refuses
    // here, naming the first, instead of stopping the first one's PostgreSQL (src/process/data-dir-lock.ts).
    const lock =
      embedded &&
      lockDataDir(
        embedded.dataDir,
        `its API at http://${config.HOST}:${config.PORT}, PostgreSQL on 127.0.0.1:${config.EMBEDDED_PG_PORT}`,
        (stale) => say(`took over the lock of pid ${stale.pid} (started ${stale.startedAt}), which is gone`),
      );
    // A forced stop exits the process: the lock goes with it, unless SIGKILL (then it is stale, and taken over).
    const release = () => lock?.release();
    process.on('exit', release);
    try {
      return await runSystem(ctx, embedded);
    } finally {
      release();
      process.off('exit', release);
    }
  },
};

/** PostgreSQL (when embedded), the migrations, then the children until a stop: `npm start` once its lock is held. */
async function runSystem(
  { config, stopRequested, isStopping, onForcedStop }: CommandContext,
  embedded: Embedded | undefined,
): Promise<number> {
  const postgres = embedded?.postgres;
  const children: Child[] = [];
  // A second signal: no more waiting. Also when this process dies anyway: take the children with it.
  const killChildren = () => children.forEach(({ child }) => child.exitCode === null && child.kill('SIGKILL'));
  onForcedStop(async () => {
    say('second signal: stopping everything now');
    killChildren();
    await postgres?.stop();
  });
  process.on('exit', killChildren);

  // Stops whatever has started, in order; a signal during start-up lands here too, so a
  // PostgreSQL already running is never left behind.
  const stopAll = async (reason: string) => {
    const labels = children.length ? children.map((c) => c.label) : ['the worker', 'the API'];
    say(`${reason}: stopping ${labels.join(', then ')}, then PostgreSQL`);
    const timeoutMs = (config.SHUTDOWN_TIMEOUT_SECONDS + 5) * 1000;
    for (const { name, child } of children) await stopChild(child, name, timeoutMs);
    await postgres?.stop();
    say('stopped');
  };

  try {
    if (embedded) await startEmbedded(embedded, config, isStopping);
    else say('DATABASE_URL is set: using that server, not starting the embedded one');
    if (!isStopping()) {
      await runMigrations(config.DATABASE_URL);
      say('migrations applied');
      if (config.OUTBOX_WRITES === 'wal') await ensureWalSlot(config.DATABASE_URL, config.OUTBOX_SLOT);
    }
  } catch (err) {
    // A start-up step that failed because a stop came in meanwhile: stop as asked, not an error.
    if (!isStopping()) {
      await postgres?.stop();
      if (err instanceof PortTakenError) {
        throw new Error(
          `the embedded PostgreSQL cannot listen: ${err.message}. Set EMBEDDED_PG_PORT to a free port, or stop what listens there`,
        );
      }
      throw err;
    }
  }
  if (isStopping()) {
    await stopAll(await stopRequested);
    return 0;
  }

  const api = startChildren(config, children);
  void announceWhenReady({ config, api, others: children.map((c) => c.child), say });
  const childExited = new Promise<string>((resolve) => {
    for (const { name, child } of children) {
      child.on('exit', (code, signal) => resolve(`${name} exited unexpectedly (${signal ?? code})`));
    }
  });
  const asked = stopRequested.then((reason) => ({ reason, code: 0 }));
  const { reason, code } = await Promise.race([asked, childExited.then((r) => ({ reason: r, code: 1 }))]);
  await stopAll(reason);
  return code;
}

runMain(startCommand, import.meta.url);
