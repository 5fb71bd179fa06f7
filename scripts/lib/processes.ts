import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { lifelineEnv } from '../../src/process/lifeline.ts';

/*
 * How the scripts run processes: a command to completion (runProcess), or one of our entry points
 * as a long-running child (startNodeProcess: `node --import tsx`, its output to a log, stopped
 * with SIGTERM then SIGKILL). Every child carries this process's lifeline
 * (src/process/lifeline.ts): whatever started the script, its children stop when it goes.
 */

/** The repository root (scripts/lib → ../..). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export { freePort } from '../../src/net/free-port.ts';

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

export interface NodeProcessSpec {
  /** The script, relative to the repository root, run by `node --import tsx`. */
  entry: string;
  args?: string[];
  /** The child's whole environment (this process's lifeline is added). */
  env: NodeJS.ProcessEnv;
  /** Appends the child's stdout and stderr here, after a line naming the start; without it the output is dropped. */
  logFile?: string;
  /** The child's output goes to this process's instead (to look into a slow run); logFile is then unused. */
  inherit?: boolean;
  /** Its own process group: a terminal's Ctrl-C reaches only this script, which stops the child in order. */
  detached?: boolean;
  /** Called for every output line (stdout and stderr), when the output is not inherited. */
  onLine?: (line: string) => void;
}

export interface NodeProcess {
  child: ChildProcess;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once the process has written a line containing `text` (it is ready); rejects if it exits first. */
  waitForOutput(text: string, timeoutMs?: number): Promise<void>;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

/** `node --import tsx <entry>`: the real node process, so a signal reaches it (npx tsx would leave it behind). */
export function startNodeProcess(spec: NodeProcessSpec): NodeProcess {
  const { cmd, args } = nodeTsx(spec.entry, ...(spec.args ?? []));
  const child = spawn(cmd, args, {
    cwd: ROOT,
    env: { ...spec.env, ...lifelineEnv() },
    detached: spec.detached ?? false,
    stdio: spec.inherit ? ['ignore', 'inherit', 'inherit'] : ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.once('exit', (code, signal) => r({ code, signal })),
  );
  const seen: string[] = [];
  const waiting = new Set<() => void>();
  if (!spec.inherit) {
    const log = spec.logFile ? createWriteStream(spec.logFile, { flags: 'a' }) : undefined;
    log?.write(`--- ${new Date().toISOString()} ${spec.entry} pid ${child.pid}\n`);
    for (const stream of [child.stdout!, child.stderr!]) {
      readline.createInterface({ input: stream }).on('line', (line) => {
        log?.write(`${line}\n`);
        seen.push(line);
        spec.onLine?.(line);
        for (const w of waiting) w();
      });
    }
    void exited.then(() => log?.end());
  }
  const waitForOutput = (text: string, timeoutMs = 60_000) =>
    new Promise<void>((resolve, reject) => {
      const where = spec.logFile ? `; see ${spec.logFile}` : '';
      const check = () => {
        if (!seen.some((l) => l.includes(text))) return;
        done();
        resolve();
      };
      const timer = setTimeout(() => fail(`${spec.entry} did not log "${text}" within ${timeoutMs} ms${where}`), timeoutMs);
      const onExit = ({ code }: { code: number | null }) => fail(`${spec.entry} exited (${code}) before logging "${text}"${where}`);
      const fail = (msg: string) => {
        done();
        reject(new Error(msg));
      };
      const done = () => {
        clearTimeout(timer);
        waiting.delete(check);
      };
      waiting.add(check);
      void exited.then(onExit);
      check();
    });
  return { child, exited, waitForOutput, stop: (graceMs) => stopChild(child, graceMs) };
}
