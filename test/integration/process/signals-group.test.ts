import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { descendants, expectAllGone, killLeftovers, ROOT, scriptEnv, watchRun } from '../../helpers/npm-run.ts';

/*
 * Ctrl-C in a terminal, or `kill -TERM -<pgid>`, signals the whole process group: npm (here the
 * shell npm runs scripts through) and the node process get SIGTERM at the same moment, and the
 * parent's exit then fires the node process's lifeline too. That second notice must not count as
 * a second signal (which stops at once, exit 1): the process drains once and exits 0. Every
 * long-running command (API, worker, earnings consumer, npm start) stops through the same helper
 * (src/process/run-main.ts); this entry's stop takes 2 s, so the lifeline always fires mid-stop.
 */
describe('SIGTERM to the whole process group', () => {
  it('one graceful stop, exit 0, although the lifeline also sees the parent go', async () => {
    const sh = spawn('sh', ['-c', 'node --import tsx test/helpers/slow-stop-entry.ts; exit $?'], {
      cwd: ROOT,
      // '; exit $?' keeps the shell from exec'ing node: the shell stays its parent, as under npm.
      // npm_lifecycle_event: what npm sets, and what makes the lifeline watch the parent.
      env: scriptEnv({ npm_lifecycle_event: 'slow-stop', LOG_FORMAT: 'json' }),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group, as a terminal gives a command
    });
    const run = watchRun(sh);
    let pids: number[] = [];
    try {
      await run.waitForLine(/slow-stop running/);
      pids = descendants(sh.pid!);
      expect(pids.length).toBeGreaterThan(0);
      process.kill(-sh.pid!, 'SIGTERM');
      await expectAllGone(run, pids, 20_000);
      const logs = run.json();
      // The lifeline saw the parent go while the stop was under way...
      expect(logs.find((l) => /parent process gone/.test(String(l.msg)))).toBeDefined();
      // ...and it was not taken for a second signal: the stop finished and the exit code was 0.
      expect(run.lines.join('\n')).not.toMatch(/second signal|timed out/);
      expect(logs.find((l) => l.msg === 'slow-stop stopped')).toBeDefined();
      expect(logs.find((l) => l.msg === 'exited after its parent went away')).toMatchObject({ exitCode: 0 });
    } finally {
      killLeftovers([sh.pid!, ...pids, ...descendants(sh.pid!)]);
    }
  }, 60_000);
});
