import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { commandOf, descendants, expectAllGone, isRunning, killLeftovers, ROOT, watchRun, type NpmRun } from '../../helpers/npm-run.ts';

/*
 * src/process/lifeline.ts on its own, with a stand-in for npm: a node process that runs the entry
 * through `sh -c`, as npm does, with npm_lifecycle_event set. SIGKILL to the stand-in leaves the
 * shell alive (it still waits for its child): the entry must notice that npm, its grandparent, is
 * gone. And a process not started by npm keeps running when its parent exits.
 */

const ENTRY = 'node --import tsx test/helpers/lifeline-entry.ts';
const started: number[] = [];
afterEach(() => killLeftovers(started.splice(0)));

function fakeNpm(env: NodeJS.ProcessEnv, entry = ENTRY): NpmRun {
  const script = `require('child_process').spawn('sh', ['-c', ${JSON.stringify(entry)}], { stdio: 'inherit' }); setInterval(() => {}, 1000);`;
  return watchRun(spawn(process.execPath, ['-e', script], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] }));
}

describe('lifeline', () => {
  it('notices a SIGKILLed npm although the shell between them lives on', async () => {
    const run = fakeNpm({ ...process.env, npm_lifecycle_event: 'fixture' });
    await run.waitForLine(/^ready$/, 30_000);
    const pids = descendants(run.npm.pid!);
    started.push(run.npm.pid!, ...pids);
    expect(pids.map(commandOf)).toContain(`sh -c ${ENTRY}`);
    run.npm.kill('SIGKILL');
    await expectAllGone(run, pids, 30_000);
    expect(run.lines).toContain('stopping');
    // Noticed through the grandparent: the shell, its parent, was still there.
    expect(run.json().find((l) => /parent process gone/.test(l.msg))).toMatchObject({ parentPid: run.npm.pid });
    expect(run.json().find((l) => l.msg === 'exited after its parent went away')).toMatchObject({ exitCode: 0 });
  }, 60_000);

  it('leaves alone a process that npm did not start', async () => {
    const { npm_lifecycle_event: _e, ...env } = process.env;
    const run = fakeNpm(env);
    // A control, started under npm and orphaned at the same moment: once it has noticed and is
    // gone, a lifeline has had the time it needs on this machine, under its load of the moment.
    const control = fakeNpm({ ...process.env, npm_lifecycle_event: 'fixture' });
    await Promise.all([run.waitForLine(/^ready$/, 30_000), control.waitForLine(/^ready$/, 30_000)]);
    const pids = descendants(run.npm.pid!);
    const controlPids = descendants(control.npm.pid!);
    started.push(run.npm.pid!, ...pids, control.npm.pid!, ...controlPids);
    const killedAt = Date.now();
    run.npm.kill('SIGKILL');
    control.npm.kill('SIGKILL');
    await expectAllGone(control, controlPids, 30_000);
    expect(control.lines).toContain('stopping');
    // And never less than six polls' worth (the control may have polled first by chance).
    await new Promise((r) => setTimeout(r, Math.max(0, killedAt + 1_500 - Date.now())));
    expect(pids.filter(isRunning).length).toBe(pids.length);
    expect(run.lines).not.toContain('stopping');
  }, 60_000);

  it('notices a SIGKILLed harness that named itself in STAYHUB_LIFELINE, not started by npm', async () => {
    const { npm_lifecycle_event: _e, ...env } = process.env;
    // A harness as the chaos run is: it starts the entry detached (a process group of its own), with
    // its lifeline in the environment, and is then SIGKILLed.
    const script = `
      const { lifelineEnv } = await import('./src/process/lifeline.ts');
      const { spawn } = await import('node:child_process');
      spawn('node', ['--import', 'tsx', 'test/helpers/lifeline-entry.ts'], {
        env: { ...process.env, ...lifelineEnv() }, detached: true, stdio: 'inherit' });
      setInterval(() => {}, 1000);`;
    const run = watchRun(
      spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        cwd: ROOT,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    await run.waitForLine(/^ready$/, 30_000);
    const pids = descendants(run.npm.pid!);
    started.push(run.npm.pid!, ...pids);
    run.npm.kill('SIGKILL');
    await expectAllGone(run, pids, 30_000);
    expect(run.lines).toContain('stopping');
    expect(run.json().find((l) => /parent process gone/.test(l.msg))).toMatchObject({ parentPid: run.npm.pid });
  }, 60_000);

  describe('npm gone before the lifeline is armed (killed while node starts)', () => {
    const LATE_ENTRY = 'node --import tsx test/helpers/lifeline-late-entry.ts';
    const parentOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);

    async function orphanedWhileStarting(kill: (npm: number, shell: number) => void, orphan: (shell: number, node: number) => number) {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-lifeline-'));
      const go = path.join(dir, 'go');
      try {
        const run = fakeNpm({ ...process.env, npm_lifecycle_event: 'fixture', LIFELINE_GO_FILE: go }, LATE_ENTRY);
        await run.waitForLine(/^starting$/, 30_000);
        const pids = descendants(run.npm.pid!);
        started.push(run.npm.pid!, ...pids);
        const shell = pids.find((p) => commandOf(p) === `sh -c ${LATE_ENTRY}`)!;
        const node = pids.find((p) => p !== shell)!;
        kill(run.npm.pid!, shell);
        // Orphaned before the lifeline module has loaded: whoever it noted as parent is init already.
        for (const until = Date.now() + 10_000; orphan(shell, node) !== 1 && Date.now() < until;)
          await new Promise((r) => setTimeout(r, 20));
        expect(orphan(shell, node)).toBe(1);
        writeFileSync(go, '');
        await expectAllGone(
          run,
          pids.filter((p) => p !== shell || isRunning(p)),
          30_000,
        );
        expect(run.lines).toContain('stopping');
        expect(run.json().find((l) => /before the lifeline was armed/.test(l.msg))).toBeDefined();
        expect(run.json().find((l) => l.msg === 'exited after its parent went away')).toMatchObject({ exitCode: 0 });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }

    it('stops when npm was SIGKILLed and the shell between them waits on under init', async () => {
      await orphanedWhileStarting(
        (npm) => process.kill(npm, 'SIGKILL'),
        (shell) => parentOf(shell),
      );
    }, 60_000);

    it('stops when npm and its shell are gone and init is its parent', async () => {
      await orphanedWhileStarting(
        (npm, shell) => {
          process.kill(npm, 'SIGKILL');
          process.kill(shell, 'SIGKILL');
        },
        (_shell, node) => parentOf(node),
      );
    }, 60_000);
  });
});
