import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { guardChild } from '../../src/db/orphan-watchdog.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';

/*
 * A real PgBouncer (Debian package `pgbouncer`, 1.18; .ci/run installs it) for tests and the bench
 * (scripts/bench/api.ts), started on a free port with a configuration of its own in front of a
 * PostgreSQL server. Nothing here imports vitest, so the bench can use it too.
 */

/** For skipWithout (test/helpers/tools.ts): the package that brings the binary. */
export const PGBOUNCER_INSTALL = 'apt-get install -y pgbouncer';

export interface PgBouncer {
  /** `serverUrl` (any database of that server) with PgBouncer's port instead of the server's. */
  url(serverUrl: string): string;
  /** What PgBouncer printed so far (its log goes to stderr). */
  readonly output: string;
  stop(): Promise<void>;
}

/**
 * Starts pgbouncer with `settings` (pool_mode, pool sizes…) in front of the server of `serverUrl`,
 * every database of it (`* =`), signing in to PostgreSQL as that URL's user.
 */
export async function startPgBouncer(serverUrl: string, settings: Record<string, string | number>): Promise<PgBouncer> {
  const server = new URL(serverUrl);
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-pgbouncer-'));
  const user = decodeURIComponent(server.username);
  const userlist = path.join(dir, 'userlist.txt');
  writeFileSync(userlist, `"${user}" "${decodeURIComponent(server.password)}"\n`);
  const config = path.join(dir, 'pgbouncer.ini');
  const lines = {
    listen_addr: '127.0.0.1',
    listen_port: port,
    unix_socket_dir: '',
    // Clients are trusted (the test's own); PgBouncer signs in to PostgreSQL with userlist.txt.
    auth_type: 'trust',
    auth_file: userlist,
    max_client_conn: 200,
    default_pool_size: 4,
    ...settings,
  };
  writeFileSync(
    config,
    `[databases]\n* = host=${server.hostname} port=${server.port}\n\n[pgbouncer]\n` +
      Object.entries(lines)
        .map(([k, v]) => `${k} = ${v}`)
        .join('\n') +
      '\n',
  );
  // PgBouncer refuses to run as root: as root, it switches to the `postgres` user (as the embedded
  // server does), which must read its files.
  for (const f of [dir, userlist, config]) chmodSync(f, f === dir ? 0o755 : 0o644);
  const asRoot = process.getuid?.() === 0;
  let output = '';
  const child: ChildProcess = spawn('pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), config], { stdio: ['ignore', 'pipe', 'pipe'] });
  // Stopped by a watchdog if the process that started it dies first (src/db/orphan-watchdog.ts).
  if (child.pid !== undefined) guardChild(child.pid);
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const until = Date.now() + 10_000; !(await portOpen(port));) {
      if (child.exitCode !== null) throw new Error(`pgbouncer exited at start (${child.exitCode}): ${output}`);
      if (Date.now() > until) throw new Error(`pgbouncer did not listen on ${port} within 10 s: ${output}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    url(of: string) {
      const u = new URL(of);
      u.port = String(port);
      return u.toString();
    },
    get output() {
      return output;
    },
    stop,
  };
}
