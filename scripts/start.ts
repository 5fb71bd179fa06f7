import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { EMBEDDED_DEFAULTS, loadConfig } from '../src/config.ts';
import { EmbeddedPostgres, ensureDatabase } from '../src/db/embedded.ts';
import { runMigrations } from '../src/db/migrate.ts';
import { announceWhenReady, childLogEnv } from './start-console.ts';

/*
 * `npm start`: the whole system on one machine. Starts the embedded PostgreSQL (unless
 * DATABASE_URL points elsewhere), applies the migrations, then runs the API and the outbox
 * worker as two child processes with prefixed logs. Ctrl-C stops the worker (it finishes its
 * in-flight messages), then the API (it finishes its requests), then Postgres. A second Ctrl-C
 * stops everything at once.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const say = (msg: string) => process.stdout.write(`[start] ${msg}\n`);

function run(name: string, entry: string, env: NodeJS.ProcessEnv): ChildProcess {
  // Own process group: a terminal's Ctrl-C reaches only this supervisor, which stops the
  // children in order. `node --import tsx` (not `npx tsx`) so the signal reaches the real process.
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
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

async function main() {
  const config = loadConfig();
  let postgres: EmbeddedPostgres | undefined;
  if (config.usesEmbeddedDatabase) {
    postgres = new EmbeddedPostgres({
      dataDir: path.resolve(root, config.EMBEDDED_PG_DIR),
      port: config.EMBEDDED_PG_PORT,
      user: EMBEDDED_DEFAULTS.user,
      password: EMBEDDED_DEFAULTS.password,
    });
    if (await postgres.initialise()) say(`created a new cluster in ${config.EMBEDDED_PG_DIR}`);
    await postgres.start();
    await ensureDatabase(postgres.url, EMBEDDED_DEFAULTS.database);
    say(`embedded PostgreSQL listening on 127.0.0.1:${config.EMBEDDED_PG_PORT}`);
  } else {
    say('DATABASE_URL is set: using that server, not starting the embedded one');
  }
  await runMigrations(config.DATABASE_URL);
  say('migrations applied');

  const env = { ...process.env, DATABASE_URL: config.DATABASE_URL, ...childLogEnv(config) };
  const worker = run('worker', 'src/worker/drain-outbox.ts', env);
  const api = run('api', 'src/http/server.ts', env);
  const children = [worker, api];
  void announceWhenReady({ config, api, say });
  // If this process dies, take the children with it.
  process.on('exit', () => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL')));

  let stopping = false;
  const timeoutMs = (config.SHUTDOWN_TIMEOUT_SECONDS + 5) * 1000;
  const shutdown = async (reason: string, code: number) => {
    if (stopping) {
      say('second signal: stopping everything now');
      children.forEach((c) => c.kill('SIGKILL'));
      await postgres?.stop();
      process.exit(1);
    }
    stopping = true;
    say(`${reason}: stopping the worker, then the API, then PostgreSQL`);
    await stopChild(worker, 'worker', timeoutMs);
    await stopChild(api, 'api', timeoutMs);
    await postgres?.stop();
    say('stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void shutdown('SIGINT', 0));
  process.on('SIGTERM', () => void shutdown('SIGTERM', 0));
  for (const [name, child] of [['worker', worker], ['api', api]] as const) {
    child.on('exit', (code, signal) => {
      if (!stopping) void shutdown(`${name} exited unexpectedly (${signal ?? code})`, 1);
    });
  }
}

main().catch(async (err) => {
  process.stderr.write(`[start] ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
