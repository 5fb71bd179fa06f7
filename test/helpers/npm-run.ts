import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { lifelineEnv } from '../../src/process/lifeline.ts';
import { runCommand, type Command } from '../../src/process/run-main.ts';
import { entryArgs } from '../../scripts/lib/processes.ts';

/*
 * A script started the way a person or a container starts it: `npm run …` as a child of the test,
 * so the test can signal npm alone (what `docker stop` or `kill <pid>` does) and then check what
 * happened to everything npm had started. Linux only (/proc), like the machines we run on.
 */

export const ROOT = path.resolve(import.meta.dirname, '../..');

export interface NpmRun {
  npm: ChildProcess;
  /** stdout and stderr lines of npm and of everything it started (they share npm's pipes). */
  lines: string[];
  /** Resolves when the pipes close: every process that held them (npm, sh, node, …) has exited. */
  closed: Promise<void>;
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** The JSON log lines, parsed (other lines skipped), with a `[name] ` prefix removed. */
  json(): Record<string, any>[];
}

export function npmRun(args: string[], env: NodeJS.ProcessEnv): NpmRun {
  // The test's lifeline: if this test process dies, what npm started stops (src/process/lifeline.ts).
  return watchRun(spawn('npm', args, { cwd: ROOT, env: { ...env, ...lifelineEnv() }, stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** The NpmRun view of a process started with piped stdout and stderr (npm, or a stand-in for it). */
export function watchRun(npm: ChildProcess): NpmRun {
  const lines: string[] = [];
  for (const stream of [npm.stdout!, npm.stderr!]) {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const parts = (rest + chunk).split('\n');
      rest = parts.pop()!;
      lines.push(...parts);
    });
    stream.on('end', () => rest && lines.push(rest));
  }
  // 'close' comes after npm's exit *and* the end of both pipes, which the orphans hold open.
  const closed = new Promise<void>((resolve) => npm.once('close', () => resolve()));
  return {
    npm,
    lines,
    closed,
    waitForLine: (pattern, timeoutMs = 30_000) => lineMatching(lines, pattern, timeoutMs, { output: () => lines.join('\n') }),
    json() {
      return lines.flatMap((l) => {
        const i = l.indexOf('{');
        if (i < 0) return [];
        try {
          return [JSON.parse(l.slice(i)) as Record<string, any>];
        } catch {
          return [];
        }
      });
    },
  };
}

/**
 * The first of `lines` (filled in as a process writes) that matches `pattern`, looked for every
 * 25 ms. Fails after `timeoutMs`, or as soon as `ended()` says the process is gone without having
 * written it, showing `output()`.
 */
export async function lineMatching(
  lines: string[],
  pattern: RegExp,
  timeoutMs: number,
  opts: { ended?: () => boolean; output: () => string },
): Promise<string> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const hit = lines.find((l) => pattern.test(l));
    if (hit) return hit;
    const ended = opts.ended?.() ?? false;
    if (ended || Date.now() > until) {
      throw new Error(`no line matching ${pattern} ${ended ? 'before the process exited' : `within ${timeoutMs} ms`}:\n${opts.output()}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

function stat(pid: number): { ppid: number; state: string } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { state: f[0]!, ppid: Number(f[1]) };
  } catch {
    return undefined;
  }
}

/** Every live process below `pid` (children, grandchildren, …). */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const s = stat(Number(entry));
    if (!s) continue;
    children.set(s.ppid, [...(children.get(s.ppid) ?? []), Number(entry)]);
  }
  const out: number[] = [];
  const queue = [pid];
  while (queue.length) {
    for (const c of children.get(queue.shift()!) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

/**
 * Still running. Not running: no such process; a zombie (it has exited and only waits for its
 * parent to read its status); or a process caught while exiting, after the kernel released its
 * memory and before it became a zombie: its state still reads R or D, but its command line reads
 * empty (a loaded machine leaves a process in that state long enough to be seen).
 */
export function isRunning(pid: number): boolean {
  const s = stat(pid);
  if (s === undefined || s.state === 'Z' || s.state === 'X' || s.state === 'x') return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`).length > 0;
  } catch {
    return false; // gone between the two reads
  }
}

export function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return '?';
  }
}

/** SIGKILL to whatever of `pids` still runs (a failed test must not leave its processes behind). */
export function killLeftovers(pids: number[]): void {
  for (const p of pids.filter(isRunning)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

/**
 * A command run in this process as runMain runs it in its own (src/process/run-main.ts): what it
 * prints is collected as the process's stdout and stderr would be. Seconds cheaper than
 * runScript's node and tsx start, for checks that are not about the process itself.
 */
export async function runInProcess(command: Command, argv: string[], env: NodeJS.ProcessEnv): Promise<ScriptRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCommand(command, {
    argv,
    env,
    out: (l) => (stdout += `${l}\n`),
    err: (l) => (stderr += `${l}\n`),
    exitOnForcedStop: false,
  });
  return { code, stdout, stderr };
}

/**
 * Waits for `closed` and for every one of `pids` to be gone, or fails naming what is still running
 * after `timeoutMs`; kills leftovers so no test leaks them. A process closes its pipes while it
 * exits, a moment before it is gone: `closed` alone may come first.
 */
export async function expectAllGone(run: NpmRun, pids: number[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const timedOut = Symbol('timeout');
  let timer: NodeJS.Timeout | undefined;
  const r = await Promise.race([run.closed, new Promise((res) => (timer = setTimeout(() => res(timedOut), timeoutMs)))]);
  clearTimeout(timer);
  let left = pids.filter(isRunning);
  while (left.length && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 25));
    left = left.filter(isRunning);
  }
  const described = left.map((p) => `${p} ${commandOf(p)}`);
  killLeftovers(left);
  if (r === timedOut || left.length) {
    throw new Error(
      `still running ${timeoutMs} ms after npm was signalled:\n  ${described.join('\n  ')}\n--- output:\n${run.lines.join('\n')}`,
    );
  }
}

/** The environment of a fresh shell for the script under test: no database or SMTP of the runner's. */
export function scriptEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const { DATABASE_URL: _a, SMTP_URL: _b, ...inherited } = process.env;
  return { ...inherited, LOG_LEVEL: 'info', ...extra };
}

export interface ScriptRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs an entry point to its end the way its npm script does (`node --import tsx <entry> …`, or its
 * compiled JavaScript under the test run: entryArgs in scripts/lib/processes.ts; npm itself would
 * only add a start-up), in the project's folder, with `env` as its whole environment.
 * `stdin` is written to it and closed: a password for `create-admin`, or nothing.
 */
export function runScript(entry: string, args: string[], env: NodeJS.ProcessEnv, stdin = ''): Promise<ScriptRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, entryArgs(entry, ...args), {
      cwd: ROOT,
      env: { ...env, ...lifelineEnv() },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('error', reject);
    // 'close', not 'exit': the output is complete only once both pipes have ended.
    child.once('close', (code) => resolve({ code, stdout, stderr }));
    // A script that exits before reading its stdin (a usage error) closes the pipe: no failure of ours.
    child.stdin.on('error', () => {});
    child.stdin.end(stdin);
  });
}
