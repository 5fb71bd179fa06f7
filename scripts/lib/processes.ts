import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { lifelineEnv } from '../../src/process/lifeline.ts';

/*
 * How the scripts run processes: a command to completion (runProcess), or one of our entry points
 * as a long-running child (startNodeProcess, run as entryArgs says, its output to a log, stopped
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

/** Names the tree of this checkout compiled to JavaScript by the test run (test/helpers/global-setup.ts). */
export const COMPILED_TREE_ENV = 'STAYHUB_COMPILED_TREE';

/** The test run's compiled tree, for a child given an environment of its own, so that its children start from it too. */
export const compiledTreeEnv = (): NodeJS.ProcessEnv => {
  const tree = process.env[COMPILED_TREE_ENV];
  return tree === undefined ? {} : { [COMPILED_TREE_ENV]: tree };
};

/**
 * The entries outside src/ that the test run compiles with it and starts compiled: the product's
 * worker with a few handlers more (the bench's; the tests' slow, failing and relaying ones), which
 * read nothing around them but their environment. The scripts' own entries stay on tsx: they read
 * the checkout around them (its var/, its git, files beside them).
 */
export const COMPILED_WORKER_ENTRIES = [
  'scripts/bench/bench-worker.ts',
  'test/helpers/worker-entry.ts',
  'test/helpers/events-worker-entry.ts',
] as const;

/**
 * The node arguments that run one of our entry points (`script`, from the repository root) as a
 * child: `--import tsx <script>` as its npm script does (node itself, so a signal reaches it; npx
 * tsx would leave it behind). Under the test run, a command of the product's (src/) or one of
 * COMPILED_WORKER_ENTRIES runs from the compiled tree instead, as the production image runs it:
 * tsx costs a child about 0.6 CPU-s more to start, and the suite starts over a hundred.
 */
export function entryArgs(script: string, ...args: string[]): string[] {
  const fromRoot = path.relative(ROOT, path.resolve(ROOT, script));
  const tree = process.env[COMPILED_TREE_ENV];
  const compiled = fromRoot.startsWith(`src${path.sep}`) || (COMPILED_WORKER_ENTRIES as readonly string[]).includes(fromRoot);
  if (tree && compiled) return [path.join(tree, fromRoot.replace(/\.ts$/, '.js')), ...args];
  return ['--import', 'tsx', path.resolve(ROOT, script), ...args];
}

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
  /** The script, relative to the repository root (or absolute), run as entryArgs says. */
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

/** One of our entry points as a long-running child (entryArgs says how it runs). */
export function startNodeProcess(spec: NodeProcessSpec): NodeProcess {
  const child = spawn(process.execPath, entryArgs(spec.entry, ...(spec.args ?? [])), {
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
    // The file opens in the background: a folder removed meanwhile (a run's end) loses the log,
    // not the process that started the child (an unhandled 'error' would end it).
    log?.on('error', (err) => process.stderr.write(`${spec.entry}: its log ${spec.logFile} cannot be written: ${err.message}\n`));
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
