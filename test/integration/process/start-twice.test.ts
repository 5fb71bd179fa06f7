import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { lockFileOf } from '../../../src/process/data-dir-lock.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { pollApi } from '../../helpers/http.ts';
import { commandOf, descendants, expectAllGone, isRunning, killLeftovers, npmRun, type NpmRun } from '../../helpers/npm-run.ts';

/*
 * Two `npm start` in one folder. The second used to take the first one's PostgreSQL for a
 * postmaster left behind by a killed run and stop it, then print "ready" while the first one's API
 * answered, leaving the first without a database. It must refuse, non-zero, naming the first, and
 * leave it untouched; and a lock left by a start that is gone must not keep the next one out.
 */

const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-start-twice-'));
chmodSync(dir, 0o755);
const started: number[] = [];
afterAll(() => {
  killLeftovers(started);
  rmSync(dir, { recursive: true, force: true });
});

async function environment(): Promise<NodeJS.ProcessEnv> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    EMBEDDED_PG_DIR: path.join(dir, 'pg'),
    EMBEDDED_PG_PORT: String(await freePort()),
    PORT: String(await freePort()),
    MAIL_DIR: path.join(dir, 'mail'),
    LOG_LEVEL: 'info',
    ENV_FILE: '',
  };
  delete env.DATABASE_URL;
  delete env.SMTP_URL;
  return env;
}

const healthy = (env: NodeJS.ProcessEnv) =>
  pollApi(async () => ((await fetch(`http://127.0.0.1:${env.PORT}/health`)).ok ? true : undefined), 90_000, 'the API to answer /health');

const postmasterPid = () => Number(readFileSync(path.join(dir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);

/** The exit code of `run`, or 'running' if it has not exited within `ms`. */
function exitWithin(run: NpmRun, ms: number): Promise<number | null | 'running'> {
  if (run.npm.exitCode !== null) return Promise.resolve(run.npm.exitCode);
  return Promise.race([
    new Promise<number | null>((r) => run.npm.once('exit', (code) => r(code))),
    new Promise<'running'>((r) => setTimeout(() => r('running'), ms)),
  ]);
}

async function stop(run: NpmRun): Promise<void> {
  const pids = descendants(run.npm.pid!);
  process.kill(run.npm.pid!, 'SIGTERM');
  await expectAllGone(run, pids, 60_000);
}

describe('npm start twice in one folder', () => {
  it('refuses the second, naming the first, and leaves the first one running with its database', async () => {
    const env = await environment();
    const first = npmRun(['start'], env);
    started.push(first.npm.pid!);
    try {
      await healthy(env);
      const supervisor = descendants(first.npm.pid!).find((p) => /^\S*node .*src\/commands\/start\.ts/.test(commandOf(p)))!;
      const postmaster = postmasterPid();
      started.push(...descendants(first.npm.pid!));

      const second = npmRun(['start'], env);
      started.push(second.npm.pid!);
      const code = await exitWithin(second, 60_000);
      await second.closed;
      const output = second.lines.join('\n');
      expect(code, output).not.toBe('running');
      expect(code, output).not.toBe(0);
      const last = second.lines.filter((l) => l.trim() && !l.startsWith('npm ')).at(-1);
      expect(last).toContain(`another \`npm start\` is running with the data folder ${path.join(dir, 'pg')}: pid ${supervisor}`);
      expect(last).toContain(`its API at http://127.0.0.1:${env.PORT}`);
      expect(output).not.toContain('ready');

      // The first is untouched: the same postmaster, and its API still reaches its database.
      expect(isRunning(postmaster)).toBe(true);
      expect(postmasterPid()).toBe(postmaster);
      const health = await fetch(`http://127.0.0.1:${env.PORT}/health`);
      expect(health.status).toBe(200);
      expect(first.lines.join('\n')).not.toMatch(/exited unexpectedly|cannot reach the database/);
    } finally {
      await stop(first);
    }
    expect(existsSync(lockFileOf(path.join(dir, 'pg')))).toBe(false);
  }, 180_000);

  it('takes over the lock of a start that is gone', async () => {
    const env = await environment();
    // A start that was SIGKILLed: its lock names a process that no longer runs.
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    const stale = { pid: Number(gone.stdout), startTime: '1', startedAt: '2026-01-01T00:00:00.000Z', cwd: dir, serves: '' };
    writeFileSync(lockFileOf(path.join(dir, 'pg')), JSON.stringify(stale));

    const run = npmRun(['start'], env);
    started.push(run.npm.pid!);
    try {
      await healthy(env);
      expect(run.lines).toContain(`[start] took over the lock of pid ${stale.pid} (started ${stale.startedAt}), which is gone`);
      expect(JSON.parse(readFileSync(lockFileOf(path.join(dir, 'pg')), 'utf8'))).toMatchObject({ cwd: expect.any(String) });
      started.push(...descendants(run.npm.pid!));
    } finally {
      await stop(run);
    }
    expect(existsSync(lockFileOf(path.join(dir, 'pg')))).toBe(false);
  }, 180_000);
});
