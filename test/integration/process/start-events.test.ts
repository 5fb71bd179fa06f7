import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { bookAStay, httpApi, pollApi } from '../../helpers/http.ts';
import { skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { commandOf, descendants, expectAllGone, isRunning, killLeftovers, ROOT, watchRun } from '../../helpers/npm-run.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * `npm start` with NATS_URL set: besides the API and the worker (whose relay publishes into
 * JetStream) it runs the earnings consumer, says so in its banner, and stops the consumer first.
 * A booking made through the API reaches the host's earnings through the relay and the consumer.
 * Against a test database (DATABASE_URL: no embedded PostgreSQL to start, which keeps this cheap
 * enough for the suite) and a nats-server of the test's own.
 */

const skip = skipWithoutNats();
const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-start-events-'));
const tdb = useTestDatabase('startev'); // its drop fails if a child left a connection open
const nats = useNats(skip);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(skip)('npm start with NATS_URL', () => {
  it('runs the earnings consumer, announces it, feeds it bookings, and stops it first', async () => {
    const apiPort = await freePort();
    const { SMTP_URL: _s, ...inherited } = process.env;
    const env: NodeJS.ProcessEnv = {
      ...inherited,
      ENV_FILE: '',
      DATABASE_URL: tdb.url,
      NATS_URL: nats.url,
      EVENTS_STREAM: 'STARTEV',
      EVENTS_SUBJECT_PREFIX: 'startev',
      PORT: String(apiPort),
      MAIL_DIR: path.join(dir, 'mail'),
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      POLL_INTERVAL_MS: '100',
    };
    // node itself, not npm: the supervisor is what is under test, and npm would only add a start-up.
    const run = watchRun(
      spawn(process.execPath, entryArgs('src/commands/start.ts'), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] }),
    );
    const exited = new Promise<number | null>((resolve) => run.npm.once('exit', (code) => resolve(code)));
    let pids: number[] = [];
    try {
      const banner = await run.waitForLine(/^\[start\] {3}Events /, 90_000);
      expect(banner).toBe(`[start]   Events     NATS_URL=nats://127.0.0.1:${nats.port} (relay in the worker; earnings consumer running)`);
      await run.waitForLine(/earnings consumer running/, 30_000);
      const consumer = descendants(run.npm.pid!).find((p) => /src\/commands\/consume-earnings\.[jt]s/.test(commandOf(p)));
      expect(consumer, run.lines.join('\n')).toBeDefined();
      expect(isRunning(consumer!)).toBe(true);

      // A booking, through the API: relayed by the worker, applied by the consumer, served to its host.
      const api = httpApi(`http://127.0.0.1:${apiPort}`);
      const { host, booking } = await bookAStay(api);
      expect(booking.status).toBe(201);
      const earnings = await pollApi(
        async () => {
          const { body } = await api.get('/hosts/me/earnings', host.body.token);
          return body.earnings[0]?.bookings === 1 ? body.earnings : undefined;
        },
        20_000,
        "the booking in the host's earnings",
      );
      expect(earnings).toHaveLength(1);

      pids = descendants(run.npm.pid!);
      run.npm.kill('SIGTERM');
      expect(await exited).toBe(0);
      await expectAllGone(run, pids, 30_000);
    } finally {
      killLeftovers([run.npm.pid!, ...pids, ...descendants(run.npm.pid!)]);
    }
    const out = run.lines.join('\n');
    expect(out).toContain('[start] SIGTERM: stopping the earnings consumer, then the worker, then the API, then PostgreSQL');
    const consumerStopped = out.indexOf('"msg":"earnings consumer stopped"');
    const workerStopped = out.indexOf('"msg":"outbox worker stopped"');
    const apiStopping = out.indexOf('"msg":"shutting down"');
    expect(consumerStopped).toBeGreaterThan(-1);
    expect(workerStopped).toBeGreaterThan(consumerStopped);
    expect(apiStopping).toBeGreaterThan(workerStopped);
    expect(out.indexOf('[start] stopped')).toBeGreaterThan(apiStopping);
  }, 150_000);
});
