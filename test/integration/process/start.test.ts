import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import { bookAStay, httpApi, pollApi } from '../../helpers/http.ts';
import { descendants, expectAllGone, isRunning, killLeftovers, npmRun } from '../../helpers/npm-run.ts';

/*
 * The README's first command, for real: `npm start` on an empty data folder starts the embedded
 * PostgreSQL, migrates, runs the API and the worker; a booking made through the API is emailed by
 * the worker. Then SIGTERM to npm alone (npm passes no signal on: test/integration/process/signals.test.ts): the
 * supervisor notices npm's exit and stops the worker, then the API, then PostgreSQL, exits 0, and
 * no process is left — no postmaster either.
 */

const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-start-'));
chmodSync(dir, 0o755);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('npm start', () => {
  it('runs PostgreSQL, API and worker, and stops them in order when npm gets SIGTERM', async () => {
    const [pgPort, apiPort] = [await freePort(), await freePort()];
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      EMBEDDED_PG_DIR: path.join(dir, 'pg'),
      EMBEDDED_PG_PORT: String(pgPort),
      PORT: String(apiPort),
      MAIL_DIR: path.join(dir, 'mail'),
      LOG_LEVEL: 'info',
    };
    delete env.DATABASE_URL;
    delete env.SMTP_URL;
    const run = npmRun(['start'], env);
    let pids: number[] = [];
    try {
      const base = `http://127.0.0.1:${apiPort}`;
      await pollApi(async () => ((await fetch(`${base}/health`)).ok ? true : undefined), 60_000, 'the API to answer /health');
      const api = httpApi(base);
      const { booking } = await bookAStay(api);
      expect(booking.status).toBe(201);
      // The worker (a separate process) picks the committed message up and writes both emails.
      await pollApi(
        async () => ((await api.get('/health')).body.outbox.pending === 0 ? true : undefined),
        20_000,
        'the outbox to be drained',
      );
      const { readdirSync } = await import('node:fs');
      expect(readdirSync(path.join(dir, 'mail')).filter((f) => f.includes(booking.body.id))).toHaveLength(2);

      const postmasterPidFile = path.join(dir, 'pg', 'postmaster.pid');
      const postmaster = Number(readFileSync(postmasterPidFile, 'utf8').split('\n')[0]);
      pids = descendants(run.npm.pid!);
      expect(pids).toContain(postmaster);
      const killedAt = Date.now();
      process.kill(run.npm.pid!, 'SIGTERM');
      await expectAllGone(run, pids, 60_000);
      expect(isRunning(postmaster)).toBe(false);
      expect(existsSync(postmasterPidFile)).toBe(false); // a clean shutdown removes it
      const exited = run.json().find((l) => l.name === 'start' && l.msg === 'exited after its parent went away');
      expect(exited).toMatchObject({ exitCode: 0 });
      console.info(`npm start: everything stopped ${exited!.time - killedAt} ms after npm's SIGTERM`);
    } finally {
      killLeftovers([run.npm.pid!, ...pids, ...descendants(run.npm.pid!)]);
    }
    const out = run.lines.join('\n');
    // Worker first, then the API, then PostgreSQL (the supervisor says "stopped" after it).
    const workerStopped = out.indexOf('outbox worker stopped');
    const apiStopping = out.indexOf('"msg":"shutting down"');
    const noticed = out.indexOf('[start] npm (our parent) exited');
    const allStopped = out.indexOf('[start] stopped');
    expect(noticed).toBeGreaterThan(-1);
    expect(workerStopped).toBeGreaterThan(noticed);
    expect(workerStopped).toBeGreaterThan(-1);
    expect(apiStopping).toBeGreaterThan(workerStopped);
    expect(allStopped).toBeGreaterThan(apiStopping);
  }, 120_000);
});
