import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction } from '../../../src/db/transaction.ts';
import { enqueueTopic } from '../../../src/messages/enqueue.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { runScript, scriptEnv } from '../../helpers/npm-run.ts';
import { dayName, tableState } from '../../helpers/outbox-partitions.ts';
import { inCI, recordSkip } from '../../helpers/tools.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { getMessages, insertMessages } from '../../helpers/outbox-rows.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A rollout runs the previous release's processes against the new schema: `npm run migrate`
 * first, then the workers are restarted, then the API (docs/operating.md, "Changing the schema").
 * So the worker of the release before the newest migration must keep working on a database
 * migrated to HEAD: claim, run its handlers, settle, and do its housekeeping.
 *
 * "The release before the newest migration" is the commit before the one that added the newest
 * migration file, the application's (migrations/) or the outbox's own (src/outbox/migrations/), or
 * HEAD while such a file is not committed yet: its src/, scripts/ and
 * migrations/, taken with `git archive` into a temporary folder beside this checkout's
 * node_modules. It needs the git history: a shallow clone skips this file on a developer's machine
 * and fails it in CI.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();

/** Migration files, the application's and the outbox's own, as paths from the repository's root. */
const MIGRATION_FOLDERS = ['migrations', 'src/outbox/migrations'];

function previousRelease(): { commit: string; newest: string } | undefined {
  try {
    if (git('rev-parse', '--is-shallow-repository') === 'true') return undefined;
  } catch {
    return undefined; // not a git checkout
  }
  const files = MIGRATION_FOLDERS.flatMap((dir) =>
    readdirSync(path.join(ROOT, dir))
      .filter((f) => f.endsWith('.sql'))
      .map((f) => `${dir}/${f}`),
  );
  // A migration file not committed yet is the newest; else the one whose adding commit is newest.
  const uncommitted = files.find((f) => !git('log', '-1', '--format=%H', '--', f));
  if (uncommitted) return { commit: git('rev-parse', 'HEAD'), newest: uncommitted };
  const added = git('log', '-1', '--format=%H', '--diff-filter=A', '--', ...files);
  const newest = git('show', '--format=', '--name-only', '--diff-filter=A', added, '--', ...files)
    .split('\n')
    .sort()
    .at(-1)!;
  return { commit: git('rev-parse', `${added}^`), newest };
}

const release = previousRelease();
const skip = !release && !inCI;
if (skip) recordSkip('no git history (a shallow clone?): the previous release worker was not run against the new schema');

describe.skipIf(skip)("the previous release's worker on a database migrated to HEAD", () => {
  const tdb = useTestDatabase('prevw');
  let tree = '';

  beforeAll(() => {
    if (!release) throw new Error('the git history is needed to find the previous release (git fetch --unshallow)');
    tree = mkdtempSync(path.join(os.tmpdir(), 'stayhub-previous-'));
    const tar = execFileSync('git', ['archive', release.commit, 'src', 'scripts', 'migrations', 'package.json', 'tsconfig.json'], {
      cwd: ROOT,
      maxBuffer: 256 * 1024 * 1024,
    });
    execFileSync('tar', ['-x', '-C', tree], { input: tar });
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(tree, 'node_modules'));
  });
  afterAll(() => {
    if (tree) rmSync(tree, { recursive: true, force: true });
  });

  /** The file an npm script of that release runs: its package.json says, wherever its entry points lived then. */
  const entryOf = (script: string): string => {
    const scripts = (JSON.parse(readFileSync(path.join(tree, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    const entry = /^node --import tsx (\S+\.ts)/.exec(scripts[script] ?? '')?.[1];
    if (!entry) throw new Error(`the previous release has no npm script ${script} that runs a .ts file`);
    return entry;
  };

  it('its migrate finds nothing to do, and its worker sends a booking’s emails, settles, keeps house and stops cleanly', async () => {
    const mailDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-'));
    const env = scriptEnv({ DATABASE_URL: tdb.url, ENV_FILE: '', MAIL_DIR: mailDir, POLL_INTERVAL_MS: '100', BACKOFF_JITTER: 'false' });
    try {
      // Its migrations stop before HEAD's: the migrator sees the newer ones applied and runs none.
      expect(existsSync(path.join(tree, release!.newest)), release!.newest).toBe(false);
      const migrated = await runScript(path.join(tree, entryOf('migrate')), [], env);
      expect(migrated, migrated.stderr).toMatchObject({ code: 0 });

      const [message] = await insertMessages(tdb.db, [{ topic: 'booking.created', payload: bookingPayload() }]);
      // And one as this release's API writes it (priority, group, owner, turn), during the rollout
      // before the workers are restarted.
      const current = bookingPayload();
      const written = await withTransaction(tdb.db, (tx) =>
        enqueueTopic(tx, 'booking.created', current, { key: current.bookingId, group: 'host-a', owner: 'guest-a' }),
      );
      // A hole in the days ahead: its housekeeping's first round (at start) mends it, which shows the round ran.
      const hole = dayName(5);
      await tdb.pool.query(`alter table outbox detach partition ${hole}`);
      await tdb.pool.query(`drop table ${hole}`);
      const worker = spawn(process.execPath, ['--import', 'tsx', path.join(tree, entryOf('drain-outbox'))], {
        cwd: tree,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const lines: string[] = [];
      readline.createInterface({ input: worker.stdout }).on('line', (l) => lines.push(l));
      readline.createInterface({ input: worker.stderr }).on('line', (l) => lines.push(l));
      const exited = new Promise<number | null>((resolve) => worker.once('exit', (code) => resolve(code)));
      try {
        // A warning or error it logs (a claim that fails on the new schema is retried for ever) fails the test at once.
        const failing = () => {
          const error = lines.find((l) => /"level":(40|50|60)/.test(l));
          if (error) throw new Error(`the previous release's worker logged a warning or an error: ${error}`);
        };
        await waitFor(
          async () => (failing(), (await getMessages(tdb.db, [message!.id, written.id!])).every((m) => m.status === 'DONE')),
          30_000,
          'the messages DONE',
        );
        await waitFor(async () => (failing(), (await tableState(tdb.pool, hole)) === 'partition'), 30_000, 'its first housekeeping round');
      } finally {
        worker.kill('SIGTERM');
      }
      expect(await exited, lines.join('\n')).toBe(0);
      expect(readdirSync(mailDir).filter((f) => f.endsWith('.eml'))).toHaveLength(4); // each booking's guest's and host's
      const logged = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: number; msg: string });
      expect(logged.filter((l) => l.level >= 40)).toEqual([]); // no warning, no error
    } finally {
      rmSync(mailDir, { recursive: true, force: true });
    }
  });
});
