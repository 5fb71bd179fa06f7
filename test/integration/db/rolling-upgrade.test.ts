import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import { countNotDone, statusCounts } from '../../../src/outbox/testing.ts';
import { urlFor } from '../../helpers/db.ts';
import { bookAStay, httpApi, pollApi, type Answer, type HttpApi } from '../../helpers/http.ts';
import { runScript, scriptEnv, watchRun, type NpmRun } from '../../helpers/npm-run.ts';
import { startSmtpServer, type TestSmtpServer } from '../../helpers/smtp.ts';
import { inCI, recordSkip } from '../../helpers/tools.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The upgrade drill: a database of the released version upgraded to this tree while bookings keep
 * arriving, in the order docs/operating.md ("Upgrading a running StayHub") gives:
 *   1. the released API and worker serve;        2. this tree's `migrate` runs beside them;
 *   3. this tree's worker starts beside the released one, which then stops (SIGTERM);
 *   4. this tree's API starts, the traffic moves to it, the released API stops (SIGTERM).
 * Then: no request answered 5xx or left unanswered, every message DONE and none DEAD, and each
 * email sent exactly once (by Message-ID, at a real SMTP server): nothing lost, nothing done twice.
 *
 * "The released version" is the commit that set package.json's version to the newest version in
 * CHANGELOG.md: its src/, scripts/ and migrations/ from `git archive`, beside this checkout's
 * node_modules. Like the previous-release worker test, it needs the git history.
 *
 * Slow (about 15 s alone): four processes start, each a TypeScript program loaded by tsx.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();

function releasedCommit(): { version: string; commit: string } | undefined {
  try {
    if (git('rev-parse', '--is-shallow-repository') === 'true') return undefined;
  } catch {
    return undefined; // not a git checkout
  }
  const version = /^## \[(\d+\.\d+\.\d+)\]/m.exec(readFileSync(path.join(ROOT, 'CHANGELOG.md'), 'utf8'))?.[1];
  if (!version) throw new Error('CHANGELOG.md names no released version (## [x.y.z])');
  const commit = git('log', '-1', '--format=%H', `-S"version": "${version}"`, '--', 'package.json');
  if (!commit) throw new Error(`no commit set package.json's version to ${version}`);
  return { version, commit };
}

const released = releasedCommit();
const skip = !released && !inCI;
if (skip) recordSkip('no git history (a shallow clone?): the upgrade from the released version was not drilled');

describe.skipIf(skip)('a rolling upgrade from the released version, under load', () => {
  let tree = '';
  let database = '';
  let smtp: TestSmtpServer;
  const admin = () => new pg.Client({ connectionString: urlFor('postgres') });
  const started: NpmRun[] = [];

  beforeAll(async () => {
    if (!released) throw new Error('the git history is needed to find the released version (git fetch --unshallow)');
    tree = mkdtempSync(path.join(os.tmpdir(), 'stayhub-released-'));
    const tar = execFileSync(
      'git',
      ['archive', released.commit, 'src', 'scripts', 'migrations', 'public', 'package.json', 'tsconfig.json'],
      {
        cwd: ROOT,
        maxBuffer: 256 * 1024 * 1024,
      },
    );
    execFileSync('tar', ['-x', '-C', tree], { input: tar });
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(tree, 'node_modules'));
    // An empty database: the released version's migrations make it.
    database = `upgrade_${Math.random().toString(36).slice(2, 10)}`;
    const c = admin();
    await c.connect();
    await c.query(`create database ${database} template template0`);
    await c.end();
    smtp = await startSmtpServer();
  });
  afterAll(async () => {
    for (const p of started) p.npm.kill('SIGKILL');
    await Promise.all(started.map((p) => p.closed));
    await smtp?.close();
    if (database) {
      const c = admin();
      await c.connect();
      await c.query(`drop database if exists ${database} with (force)`);
      await c.end();
    }
    if (tree) rmSync(tree, { recursive: true, force: true });
  });

  /** The file an npm script of `root`'s package.json runs. */
  const entryOf = (root: string, script: string): string => {
    const scripts = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    const entry = /^node --import tsx (\S+\.ts)/.exec(scripts[script] ?? '')?.[1];
    if (!entry) throw new Error(`${root} has no npm script ${script} that runs a .ts file`);
    return path.join(root, entry);
  };

  it('loses no message, does none twice and answers no 5xx while the API and the worker roll', async () => {
    const env = (extra: Record<string, string> = {}) =>
      scriptEnv({
        DATABASE_URL: urlFor(database),
        ENV_FILE: '',
        SMTP_URL: smtp.url,
        POLL_INTERVAL_MS: '100',
        RATE_LIMIT_AUTH_PER_MINUTE: '1000',
        LOG_LEVEL: 'warn',
        ...extra,
      });
    const start = (root: string, script: string, extra: Record<string, string> = {}): NpmRun => {
      const run = watchRun(
        spawn(process.execPath, ['--import', 'tsx', entryOf(root, script)], {
          cwd: root,
          env: env(extra),
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
      started.push(run);
      return run;
    };
    const stop = async (run: NpmRun) => {
      const exited = new Promise<number | null>((resolve) => run.npm.once('exit', (code) => resolve(code)));
      run.npm.kill('SIGTERM');
      expect(await exited, run.lines.join('\n')).toBe(0);
    };
    const serving = async (port: number, run: NpmRun) => {
      await pollApi(
        async () => {
          if (run.npm.exitCode !== null) throw new Error(`the API on ${port} exited ${run.npm.exitCode}:\n${run.lines.join('\n')}`);
          return (await fetch(`http://127.0.0.1:${port}/health`)).ok ? true : undefined;
        },
        60_000,
        `the API on ${port}`,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${run.lines.join('\n')}`);
      });
    };

    // 1. The released version, migrated and serving.
    const migratedBefore = await runScript(entryOf(tree, 'migrate'), [], env());
    expect(migratedBefore, migratedBefore.stderr).toMatchObject({ code: 0 });
    const [oldPort, newPort] = [await freePort(), await freePort()];
    const oldApi = start(tree, 'api', { PORT: String(oldPort) });
    const oldWorker = start(tree, 'drain-outbox');
    await serving(oldPort, oldApi);

    let api: HttpApi = httpApi(`http://127.0.0.1:${oldPort}`);
    // A first session on the released version: a host, a guest, a flat, a stay booked five days out.
    const { guest, property, booking } = await bookAStay(api);
    expect([guest.status, property.status, booking.status]).toEqual([201, 201, 201]);

    // Bookings of one night each, on nights no other takes (after the first stay); every third one cancelled.
    const answers: { status: number; what: string }[] = [{ status: booking.status, what: 'book' }];
    let nights = 10;
    let loading = true;
    const day = (n: number) => new Date(Date.now() + n * 86_400_000).toISOString().slice(0, 10);
    // Each client pauses between bookings: the three still keep requests arriving through every
    // step, but a booking costs the API, the worker, the SMTP server and this process's email
    // parsing their CPU, and unpaced clients made some 400 bookings (a thousand emails) where the
    // drill needs 25. Paced, about 150.
    const PAUSE_MS = 250;
    const client = async () => {
      while (loading) {
        const n = ++nights;
        const booked = await api
          .post('/bookings', { propertyId: property.body.id, checkIn: day(n), checkOut: day(n + 1), guests: 1 }, guest.body.token)
          .catch((err: Error): Answer => ({ status: 0, body: { error: err.message } }));
        answers.push({ status: booked.status, what: 'book' });
        if (booked.status === 201 && n % 3 === 0) {
          const cancelled = await api
            .post(`/bookings/${String(booked.body.id)}/cancel`, {}, guest.body.token)
            .catch((err: Error) => ({ status: 0, body: { error: err.message } }));
          answers.push({ status: cancelled.status, what: 'cancel' });
        }
        await sleep(PAUSE_MS);
      }
    };
    const load = Promise.all([client(), client(), client()]);
    const bookedSoFar = () => answers.filter((a) => a.what === 'book').length;
    const moreBookings = async (n: number, what: string) => {
      const target = bookedSoFar() + n;
      await waitFor(async () => bookedSoFar() >= target || undefined, 60_000, what);
    };

    try {
      await moreBookings(5, 'bookings on the released version');
      // 2. This tree's migrations, the released processes serving.
      const migrated = await runScript(entryOf(ROOT, 'migrate'), [], env());
      expect(migrated, migrated.stderr).toMatchObject({ code: 0 });
      await moreBookings(5, 'bookings after the migration, on the released processes');
      // 3. The workers roll: the new one beside the released one, then the released one stops.
      const newWorker = start(ROOT, 'drain-outbox');
      await moreBookings(5, 'bookings with both workers');
      await stop(oldWorker);
      await moreBookings(5, 'bookings with the new worker alone');
      // 4. The API rolls: the new one serves, the traffic moves, the released one stops.
      const newApi = start(ROOT, 'api', { PORT: String(newPort) });
      await serving(newPort, newApi);
      api = httpApi(`http://127.0.0.1:${newPort}`);
      await sleep(500); // requests already sent to the released API are answered before it stops
      await stop(oldApi);
      await moreBookings(5, 'bookings on the new API');
      loading = false;
      await load;

      const created = answers.filter((a) => a.what === 'book' && a.status === 201).length;
      const cancelled = answers.filter((a) => a.what === 'cancel' && a.status === 200).length;
      expect(answers.filter((a) => !(a.status === 201 || (a.what === 'cancel' && a.status === 200)))).toEqual([]);
      expect(created).toBeGreaterThanOrEqual(25);

      const q = new pg.Client({ connectionString: urlFor(database) });
      await q.connect();
      try {
        await waitFor(async () => (await countNotDone(q)) === 0 || undefined, 60_000, 'every message DONE');
        expect((await statusCounts(q)).map((s) => s.status)).toEqual(['DONE']);
      } finally {
        await q.end();
      }
      // Each booking's guest and host told once of it, and once of its cancellation.
      const ids = smtp.received.map((m) => m.parsed.messageId);
      expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([]);
      expect(ids).toHaveLength(2 * created + 2 * cancelled);
      await stop(newWorker);
      await stop(newApi);
    } finally {
      loading = false;
      await load;
    }
    // Nothing at error level from any of the four processes.
    for (const run of started) expect(run.json().filter((l) => Number(l.level) >= 50)).toEqual([]);
  }, 180_000);
});
