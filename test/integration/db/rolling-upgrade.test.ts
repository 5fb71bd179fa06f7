import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import { urlFor } from '../../helpers/db.ts';
import { httpApi } from '../../helpers/http.ts';
import { runScript, scriptEnv } from '../../helpers/npm-run.ts';
import { entryOf, firstSessionThenLoad, nothingLostNorDoubled, rollingProcesses } from '../../helpers/rolling.ts';
import { startSmtpServer, type TestSmtpServer } from '../../helpers/smtp.ts';
import { inCI, recordSkip } from '../../helpers/tools.ts';

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
  const processes = rollingProcesses((extra) =>
    scriptEnv({
      DATABASE_URL: urlFor(database),
      ENV_FILE: '',
      SMTP_URL: smtp.url,
      POLL_INTERVAL_MS: '100',
      RATE_LIMIT_AUTH_PER_MINUTE: '1000',
      LOG_LEVEL: 'warn',
      ...extra,
    }),
  );

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
    await processes.killAll();
    await smtp?.close();
    if (database) {
      const c = admin();
      await c.connect();
      await c.query(`drop database if exists ${database} with (force)`);
      await c.end();
    }
    if (tree) rmSync(tree, { recursive: true, force: true });
  });

  it('loses no message, does none twice and answers no 5xx while the API and the worker roll', async () => {
    const { start, stop, serving } = processes;
    // 1. The released version, migrated and serving.
    const migratedBefore = await runScript(entryOf(tree, 'migrate'), [], processes.env());
    expect(migratedBefore, migratedBefore.stderr).toMatchObject({ code: 0 });
    const [oldPort, newPort] = [await freePort(), await freePort()];
    const oldApi = start(tree, 'api', { PORT: String(oldPort) });
    const oldWorker = start(tree, 'drain-outbox');
    await serving(oldPort, oldApi);

    // A first session on the released version (a host, a guest, a flat, a stay), then the clients.
    const load = await firstSessionThenLoad(oldPort);

    try {
      await load.more(5, 'bookings on the released version');
      // 2. This tree's migrations, the released processes serving.
      const migrated = await runScript(entryOf(ROOT, 'migrate'), [], processes.env());
      expect(migrated, migrated.stderr).toMatchObject({ code: 0 });
      await load.more(5, 'bookings after the migration, on the released processes');
      // 3. The workers roll: the new one beside the released one, then the released one stops.
      const newWorker = start(ROOT, 'drain-outbox');
      await load.more(5, 'bookings with both workers');
      await stop(oldWorker);
      await load.more(5, 'bookings with the new worker alone');
      // 4. The API rolls: the new one serves, the traffic moves, the released one stops.
      const newApi = start(ROOT, 'api', { PORT: String(newPort) });
      await serving(newPort, newApi);
      load.moveTo(httpApi(`http://127.0.0.1:${newPort}`));
      await sleep(500); // requests already sent to the released API are answered before it stops
      await stop(oldApi);
      await load.more(5, 'bookings on the new API');
      await nothingLostNorDoubled(load, urlFor(database), smtp, 25);
      await stop(newWorker);
      await stop(newApi);
    } finally {
      await load.stop();
    }
    // Nothing at error level from any of the four processes.
    expect(processes.errors()).toEqual([]);
  }, 180_000);
});
