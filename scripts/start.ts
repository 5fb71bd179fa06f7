import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { EMBEDDED_DEFAULTS, loadConfig } from '../src/config.ts';
import { EmbeddedPostgres, embeddedDataDir, ensureDatabase } from '../src/db/embedded.ts';
import { runMigrations } from '../src/db/migrate.ts';
import { onParentGone } from '../src/process/lifeline.ts';
import { announceWhenReady, childLogEnv } from './start-console.ts';

/*
 * `npm start`: the whole system on one machine. Starts the embedded PostgreSQL (unless
 * DATABASE_URL points elsewhere), applies the migrations, then runs the API and the outbox
 * worker as two child processes with prefixed logs. Ctrl-C stops the worker (it finishes its
 * in-flight messages), then the API (it finishes its requests), then Postgres. A second Ctrl-C
 * stops everything at once. SIGTERM does the same, and so does the exit of the npm that ran us
 * (npm passes no SIGTERM on: src/process/lifeline.ts).
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const say = (msg: string) => process.stdout.write(`[start] ${msg}\n`);

// Built (`npm run build`: dist/scripts/start.js) the children are the built JavaScript too.
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

let stopping = false;

async function main() {
  const config = loadConfig();
  let postgres: EmbeddedPostgres | undefined;
  const children: { name: string; child: ChildProcess }[] = [];

  // Handlers first: a signal (or npm's exit) during start-up must stop a PostgreSQL that is
  // already running, not leave it behind with nobody to stop it.
  const timeoutMs = (config.SHUTDOWN_TIMEOUT_SECONDS + 5) * 1000;
  const shutdown = async (reason: string, code: number) => {
    if (stopping) {
      say('second signal: stopping everything now');
      children.forEach(({ child }) => child.kill('SIGKILL'));
      await postgres?.stop();
      process.exit(1);
    }
    stopping = true;
    say(`${reason}: stopping the worker, then the API, then PostgreSQL`);
    for (const { name, child } of children) await stopChild(child, name, timeoutMs);
    await postgres?.stop();
    say('stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void shutdown('SIGINT', 0));
  process.on('SIGTERM', () => void shutdown('SIGTERM', 0));
  // npm passes no SIGTERM on: when the npm that ran `npm start` exits, stop as on SIGTERM.
  onParentGone(() => !stopping && void shutdown('npm (our parent) exited', 0), { name: 'start' });
  // If this process dies anyway, take the children with it.
  process.on('exit', () => children.forEach(({ child }) => child.exitCode === null && child.kill('SIGKILL')));

  if (config.usesEmbeddedDatabase) {
    const { dataDir, unreachable } = embeddedDataDir({ root, configured: config.EMBEDDED_PG_DIR });
    if (unreachable) say(`the "postgres" user cannot reach ${unreachable} (a private folder): PostgreSQL keeps its data in ${dataDir}`);
    postgres = new EmbeddedPostgres({
      dataDir,
      port: config.EMBEDDED_PG_PORT,
      user: EMBEDDED_DEFAULTS.user,
      password: EMBEDDED_DEFAULTS.password,
    });
    if (await postgres.initialise()) say(`created a new cluster in ${unreachable ? dataDir : config.EMBEDDED_PG_DIR}`);
    if (stopping) return;
    await postgres.start();
    if (stopping) return;
    await ensureDatabase(postgres.url, EMBEDDED_DEFAULTS.database);
    say(`embedded PostgreSQL listening on 127.0.0.1:${config.EMBEDDED_PG_PORT}`);
  } else {
    say('DATABASE_URL is set: using that server, not starting the embedded one');
  }
  await runMigrations(config.DATABASE_URL);
  say('migrations applied');
  if (stopping) return; // the shutdown under way stops PostgreSQL and exits

  // STAYHUB_SUPERVISED: the children treat the IPC channel below as their lifeline (src/process/lifeline.ts).
  const env = { ...process.env, DATABASE_URL: config.DATABASE_URL, STAYHUB_SUPERVISED: '1', ...childLogEnv(config) };
  // The worker first in the list: it is stopped first (its handlers may still call the API's database).
  children.push({ name: 'worker', child: run('worker', 'src/worker/drain-outbox.ts', env) });
  const api = run('api', 'src/http/server.ts', env);
  children.push({ name: 'api', child: api });
  void announceWhenReady({ config, api, say });
  for (const { name, child } of children) {
    child.on('exit', (code, signal) => {
      if (!stopping) void shutdown(`${name} exited unexpectedly (${signal ?? code})`, 1);
    });
  }
}

main().catch(async (err) => {
  // A start-up step that failed because a shutdown stopped PostgreSQL under it: the shutdown exits.
  if (stopping) return;
  process.stderr.write(`[start] ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
