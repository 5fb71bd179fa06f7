import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { EmbeddedPostgres } from '../../src/db/embedded.ts';
import { freePort } from './processes.ts';

/*
 * The throw-away embedded PostgreSQL the scripts start for one run (the bench, the chaos run,
 * measure-search, the trace picture): a fresh data folder under the temp folder, a free port, the
 * server's default settings (fsync on, synchronous_commit on: what a real deployment pays), and
 * everything deleted on stop. `npm start`'s database is the product's persistent one
 * (src/commands/start.ts, src/db/embedded.ts's embeddedDataDir): it is not this.
 */

export interface ThrowawayPostgres {
  /** The server itself: `stop()` and `start()` again restart it on the same data (a fault to inject). */
  pg: EmbeddedPostgres;
  /** The folder holding the data (`data/`) and, unless told otherwise, the server's log. */
  dir: string;
  /** The URL of a database on this server. */
  url(database: string): string;
  /** Creates a database and returns its URL; `template` clones an existing one (which must have no connections). */
  createDatabase(name: string, template?: string): Promise<string>;
  /** Stops the server at once and deletes its folder (unless the caller gave the folder). */
  stop(): Promise<void>;
}

export interface ThrowawayOptions {
  /** Names the temp folder (`stayhub-<name>-pg-…`) and the password. */
  name: string;
  /**
   * A folder of the caller's to hold the data (kept on stop; as root, the `postgres` user must be
   * able to pass through its parents); default: a new temp folder (deleted on stop).
   */
  dir?: string;
  /** Where the server's own log goes (default `<dir>/postgres.log`). */
  logFile?: string;
  log?: (msg: string) => void;
  /** Extra `-c name=value` settings (e.g. `wal_level: 'logical'`). */
  settings?: Record<string, string | number>;
}

export async function startThrowawayPostgres(opts: ThrowawayOptions): Promise<ThrowawayPostgres> {
  const owned = opts.dir === undefined;
  const dir = opts.dir ?? mkdtempSync(path.join(os.tmpdir(), `stayhub-${opts.name}-pg-`));
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755); // as root the server runs as `postgres`, which must reach the data folder
  const server = new EmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    port: await freePort(),
    user: 'postgres',
    password: opts.name,
    logFile: opts.logFile ?? path.join(dir, 'postgres.log'),
    ...(opts.settings ? { settings: opts.settings } : {}),
  });
  opts.log?.(`initdb in ${dir}`);
  await server.initialise();
  await server.start();

  return {
    pg: server,
    dir,
    url: (db) => server.urlFor(db),
    async createDatabase(name, template) {
      await admin(server.url, `create database "${name}"${template ? ` template "${template}"` : ''}`);
      return server.urlFor(name);
    },
    async stop() {
      await stopImmediately(server);
      if (owned) rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function admin(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

/**
 * Immediate shutdown (SIGQUIT): the data is thrown away, so the checkpoint a fast shutdown writes
 * (seconds, with fsync on, after a run's worth of writes) buys nothing.
 */
async function stopImmediately(server: EmbeddedPostgres): Promise<void> {
  const pid = server.pid;
  if (pid !== undefined) {
    try {
      process.kill(pid, 'SIGQUIT');
    } catch {
      /* already gone */
    }
  }
  await server.stop();
}

/** `fn` with a connection of its own to `url`, closed after it whatever it does. */
export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>, applicationName?: string): Promise<T> {
  const c = new pg.Client({ connectionString: url, application_name: applicationName });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}
