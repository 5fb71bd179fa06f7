import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { slowSmtp } from '../../helpers/smtp.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { getMessage, insertMessage } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';
import { descendants, expectAllGone, killLeftovers, npmRun, scriptEnv } from '../../helpers/npm-run.ts';

/*
 * Stopping through npm: npm does not pass SIGTERM on. `kill -TERM <npm>` (what `docker stop` does
 * to a container whose PID 1 is npm, or a person to the pid they see) makes npm exit at once; the
 * node process it started would live on, orphaned, until something SIGKILLed it. Each
 * long-running entry point is started here through npm, only npm is signalled, and the test
 * checks that the work in flight was finished, that the process said it exited 0, and that no
 * process npm had started is left. (`npm start`, with its PostgreSQL: test/integration/process/start.test.ts.)
 */

const tdb = useTestDatabase('signals');

const figures: string[] = [];
afterAll(() => {
  // How long after npm's death each process noticed it and exited (log times, this machine's load).
  if (figures.length) console.info(`lifeline figures:\n  ${figures.join('\n  ')}`);
});

describe('SIGTERM to npm alone', () => {
  it('npm run drain-outbox: the worker finishes the message in flight, exits 0, leaves nothing', async () => {
    const smtp = await slowSmtp(2_000);
    let pids: number[] = [];
    const run = npmRun(
      ['run', 'drain-outbox'],
      scriptEnv({
        DATABASE_URL: tdb.url,
        SMTP_URL: smtp.url,
        POLL_INTERVAL_MS: '100',
        MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
      }),
    );
    try {
      await run.waitForLine(/outbox worker started/);
      const msg = await insertMessage(tdb.db, 'booking.created', bookingPayload());
      // Both emails of the booking are in the SMTP server's hands: the handlers are in flight.
      await waitFor(async () => smtp.started() >= 1, 15_000, 'a handler to reach SMTP DATA');
      pids = descendants(run.npm.pid!);
      expect(pids.length).toBeGreaterThan(0);
      const killedAt = Date.now();
      process.kill(run.npm.pid!, 'SIGTERM');
      await expectAllGone(run, pids, 20_000);

      // The handlers were allowed to finish after npm's death, and the message was settled DONE.
      expect(smtp.accepted).toHaveLength(2);
      expect(Math.min(...smtp.accepted)).toBeGreaterThan(killedAt);
      const row = await getMessage(tdb.db, msg.id);
      expect(row.status).toBe('DONE');
      expect(row.attempts).toBe(1);

      const logs = run.json().filter((l) => l.name === 'worker');
      const gone = logs.find((l) => /parent process gone/.test(l.msg));
      const stopped = logs.find((l) => l.msg === 'outbox worker stopped');
      const exited = logs.find((l) => l.msg === 'exited after its parent went away');
      expect(gone).toBeDefined();
      expect(stopped).toMatchObject({ done: 1, handedBack: 0 });
      expect(exited).toMatchObject({ exitCode: 0 });
      expect(run.lines.join('\n')).not.toMatch(/second signal|timed out/);
      figures.push(
        `worker: noticed ${gone!.time - killedAt} ms, exited ${exited!.time - killedAt} ms after npm's SIGTERM (2 s handler in flight)`,
      );
    } finally {
      killLeftovers([run.npm.pid!, ...pids, ...descendants(run.npm.pid!)]);
      await smtp.close();
    }
  }, 60_000);

  it('npm run api: the API answers the request in flight, exits 0, leaves nothing', async () => {
    const port = await freePort();
    const run = npmRun(['run', 'api'], scriptEnv({ DATABASE_URL: tdb.url, PORT: String(port) }));
    let pids: number[] = [];
    try {
      await run.waitForLine(/Server listening/);
      // A request held in its handler: the users table is locked until the test lets it go.
      const lock = await tdb.pool.connect();
      let answered: { status: number; at: number } | undefined;
      let killedAt = 0;
      try {
        await lock.query('begin');
        await lock.query('lock table users in exclusive mode');
        const request = fetch(`http://127.0.0.1:${port}/auth/register`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ email: 'inflight@example.test', password: 'correct horse battery', name: 'In Flight', role: 'guest' }),
        }).then((res) => (answered = { status: res.status, at: Date.now() }));
        await waitFor(
          async () => {
            const { rows } = await tdb.pool.query(`select 1 from pg_locks where not granted and relation = 'users'::regclass`);
            return rows.length > 0;
          },
          30_000,
          'the request to wait for the lock',
        );

        pids = descendants(run.npm.pid!);
        killedAt = Date.now();
        process.kill(run.npm.pid!, 'SIGTERM');
        await run.waitForLine(/"msg":"shutting down"/, 10_000);
        await lock.query('commit');
        await request;
      } finally {
        lock.release();
      }
      // fetch keeps its socket alive: the API must still close promptly (Connection: close).
      await expectAllGone(run, pids, 20_000);

      expect(answered).toMatchObject({ status: 201 });
      expect(answered!.at).toBeGreaterThan(killedAt);
      const logs = run.json().filter((l) => l.name === 'api');
      const gone = logs.find((l) => /parent process gone/.test(l.msg));
      const exited = logs.find((l) => l.msg === 'exited after its parent went away');
      expect(gone).toBeDefined();
      expect(exited).toMatchObject({ exitCode: 0 });
      figures.push(
        `api: noticed ${gone!.time - killedAt} ms, exited ${exited!.time - killedAt} ms after npm's SIGTERM (request held until the shutdown began)`,
      );
    } finally {
      killLeftovers([run.npm.pid!, ...pids, ...descendants(run.npm.pid!)]);
    }
  }, 60_000);
});
