import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { lifelineEnv } from '../../../src/process/lifeline.ts';

/** The repository root (scripts/bench/lib → ../../..). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

export { freePort } from '../../../src/net/free-port.ts';

export interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Spawns a command and resolves when it exits (never rejects on a non-zero code: callers check). */
export function runProcess(
  cmd: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {},
): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd ?? ROOT,
      // This process's lifeline last: whatever started it, the child stops when this process goes.
      env: { ...process.env, ...opts.env, ...lifelineEnv() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c) => (stdout += c));
    child.stderr!.on('data', (c) => (stderr += c));
    const timer = opts.timeoutMs
      ? setTimeout(() => {
          child.kill('SIGKILL');
        }, opts.timeoutMs)
      : undefined;
    child.on('error', reject);
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `node --import tsx <script>`: the real node process, so a signal reaches it (npx tsx would leave it behind). */
export const nodeTsx = (script: string, ...args: string[]) => ({
  cmd: process.execPath,
  args: ['--import', 'tsx', path.join(ROOT, script), ...args],
});

/** Runs `count` copies of a command at once; resolves with their results once all have exited. */
export async function runParallel(count: number, make: (i: number) => Promise<Finished>): Promise<Finished[]> {
  return Promise.all(Array.from({ length: count }, (_, i) => make(i)));
}

export function assertOk(what: string, results: Finished[]): void {
  for (const r of results) {
    if (r.code !== 0) {
      throw new Error(`${what} exited with ${r.code}\n--- stderr ---\n${r.stderr.slice(-3000)}\n--- stdout ---\n${r.stdout.slice(-2000)}`);
    }
  }
}

/** Stops a child: SIGTERM, then SIGKILL after `graceMs`. */
export async function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
