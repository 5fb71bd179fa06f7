import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { commandOf, descendants, isRunning, killLeftovers, lineMatching, ROOT } from '../../helpers/npm-run.ts';

/*
 * src/db/orphan-watchdog.ts on its own: an owner process starts a server that is not a node
 * process (here `sleep`, which ignores nothing and knows no lifeline) and guards it. SIGKILL to
 * the owner: the watchdog stops the server, then exits. The server stopped by its owner as usual:
 * the watchdog exits on its own.
 */

const started: number[] = [];
afterAll(() => killLeftovers(started));

/** An owner that guards a `sleep 600` with the given steps, and prints the pids. */
function owner(steps: string) {
  const script = `
    import { spawn } from 'node:child_process';
    import { guardChild } from './src/db/orphan-watchdog.ts';
    const server = spawn('sleep', ['600'], { stdio: 'ignore' });
    guardChild(server.pid, { steps: ${steps}, intervalMs: 50 });
    process.stdout.write('server ' + server.pid + '\\n');
    process.stdin.on('data', () => { server.kill('SIGTERM'); });
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  started.push(child.pid!);
  const lines: string[] = [];
  for (const s of [child.stdout, child.stderr]) s.on('data', (c: Buffer) => lines.push(...String(c).split('\n')));
  return { child, lines };
}

async function gone(pids: number[], withinMs: number): Promise<string[]> {
  const until = Date.now() + withinMs;
  let left = pids.filter(isRunning);
  while (left.length && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 50));
    left = left.filter(isRunning);
  }
  return left.map((p) => `${p} ${commandOf(p)}`);
}

describe('orphan watchdog', () => {
  it('stops the server once its owner is SIGKILLed, then exits', async () => {
    const o = owner(`[{ signal: 'SIGTERM', afterMs: 0 }]`);
    const line = await lineMatching(o.lines, /^server \d+$/, 30_000, { output: () => o.lines.join('\n') });
    const server = Number(line.split(' ')[1]);
    const tree = descendants(o.child.pid!);
    started.push(...tree);
    const watchdog = tree.find((p) => commandOf(p).includes('stayhub watchdog'));
    expect(watchdog, tree.map(commandOf).join('\n')).toBeDefined();
    o.child.kill('SIGKILL');
    expect(await gone([server, watchdog!], 5_000)).toEqual([]);
  }, 60_000);

  it('exits by itself when the owner stops the server', async () => {
    const o = owner(`[{ signal: 'SIGKILL', afterMs: 0 }]`);
    await lineMatching(o.lines, /^server \d+$/, 30_000, { output: () => o.lines.join('\n') });
    const tree = descendants(o.child.pid!);
    started.push(...tree);
    const watchdog = tree.find((p) => commandOf(p).includes('stayhub watchdog'))!;
    o.child.stdin.write('stop\n');
    expect(await gone([watchdog], 5_000)).toEqual([]);
    expect(isRunning(o.child.pid!)).toBe(true); // the owner lives on: the watchdog left on its own
    o.child.kill('SIGKILL');
  }, 60_000);
});
