import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../helpers/db.ts';
import { commandOf, descendants, expectAllGone, killLeftovers, npmRun } from '../../helpers/npm-run.ts';

/*
 * `npm run drain-outbox` whose npm is stopped (SIGTERM, as `docker stop` or a supervisor does)
 * while the worker is still starting: node and tsx take a second or more before the lifeline is
 * armed, and a worker orphaned in that window used to run on under init for ever.
 */

const tdb = useTestDatabase('orphanstart');

describe('a worker whose npm is stopped during its start-up', () => {
  it('exits instead of running on under init', async () => {
    const { DATABASE_URL: _d, SMTP_URL: _s, ...inherited } = process.env;
    const run = npmRun(['run', 'drain-outbox'], { ...inherited, DATABASE_URL: tdb.url, LOG_LEVEL: 'info', ENV_FILE: '' });
    const npm = run.npm.pid!;
    // As soon as npm has started the worker's node, long before that node has loaded its modules.
    let worker: number | undefined;
    for (const until = Date.now() + 30_000; worker === undefined && Date.now() < until;) {
      worker = descendants(npm).find((p) => /^\S*node .*drain-outbox\.ts/.test(commandOf(p)));
      if (worker === undefined) await new Promise((r) => setTimeout(r, 5));
    }
    expect(worker, run.lines.join('\n')).toBeDefined();
    const pids = descendants(npm);
    expect(run.lines.join('\n')).not.toContain('outbox worker started');
    process.kill(npm, 'SIGTERM');
    try {
      await expectAllGone(run, pids, 60_000);
    } finally {
      killLeftovers(pids);
    }
    expect(run.json().find((l) => /parent process gone/.test(l.msg))).toBeDefined();
  }, 90_000);
});
