import type { ChildProcess } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, startNodeProcess } from '../lib/processes.ts';

/*
 * The chaos run's process supervisor. Each system process (API, workers, SMTP sink) is a real
 * child process started the way production starts it (`node --import tsx <entry>`, so a signal
 * reaches the real process), in its own process group, its output appended to a log file. Each
 * one carries this process's lifeline (src/process/lifeline.ts): if the run dies, SIGKILL
 * included, its processes stop as on SIGTERM instead of running on, orphaned.
 *
 * Like a process manager (systemd, Kubernetes) it restarts a process that exits on its own;
 * those unplanned exits are counted, because one the run did not cause is a finding. A kill the
 * run injects is planned: the process stays down until the fault restarts it.
 */

export interface ChildSpec {
  name: string;
  /** Script run by `node --import tsx` (from the repository root). */
  entry: string;
  args?: string[];
  env: NodeJS.ProcessEnv;
  logFile: string;
  /** Called for every output line (stdout and stderr). */
  onLine?: (line: string) => void;
}

/** A process exit the supervisor saw with its own eyes (the child's 'exit' event). */
export interface ExitObserved {
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class Supervised {
  private child?: ChildProcess;
  private planned = false;
  private stopped = false;
  /** Exits the run did not cause (crash, fatal error at start-up…). */
  unplannedExits: { at: number; code: number | null; signal: string | null; lastLines: string[] }[] = [];
  /** The last lines of output of the current process: why it exited, if it did on its own. */
  private tail: string[] = [];
  starts = 0;
  private restartTimer?: NodeJS.Timeout;

  constructor(readonly spec: ChildSpec) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  start(): void {
    if (this.running || this.stopped) return;
    this.planned = false;
    this.starts++;
    this.tail = [];
    // One way to start a process (scripts/lib/processes.ts): `node --import tsx`, the lifeline,
    // the output appended to the log; its own process group, so a terminal's Ctrl-C reaches the run only.
    const { child } = startNodeProcess({
      entry: path.relative(ROOT, this.spec.entry),
      args: this.spec.args,
      env: this.spec.env,
      logFile: this.spec.logFile,
      detached: true,
      onLine: (line) => {
        this.tail.push(line.slice(0, 400));
        if (this.tail.length > 6) this.tail.shift();
        this.spec.onLine?.(line);
      },
    });
    this.child = child;
    child.on('exit', (code, signal) => {
      appendFileSync(this.spec.logFile, `--- ${new Date().toISOString()} exit code=${code} signal=${signal} (start #${this.starts})\n`);
      if (this.child !== child) return;
      if (this.planned || this.stopped) return;
      this.unplannedExits.push({ at: Date.now(), code, signal, lastLines: this.tail.filter((l) => !l.includes('"level":30')) });
      // Restart after a short pause, as a process manager would.
      this.restartTimer = setTimeout(() => this.start(), 500);
    });
  }

  /**
   * Sends `signal` and waits for the exit (SIGKILL after `timeoutMs`). The process stays down.
   * Resolves with the exit it observed, or null when there was no running process to signal: a
   * fault that killed nothing must not be counted as one.
   */
  async kill(signal: NodeJS.Signals = 'SIGKILL', timeoutMs = 10_000): Promise<ExitObserved | null> {
    clearTimeout(this.restartTimer);
    const child = this.child;
    this.planned = true;
    if (!child || child.exitCode !== null || child.signalCode !== null) return null;
    const pid = child.pid!;
    const exited = new Promise<ExitObserved>((resolve) => child.once('exit', (code, sig) => resolve({ pid, code, signal: sig })));
    try {
      if (!child.kill(signal)) return null;
    } catch {
      return null;
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const seen = await exited;
    clearTimeout(timer);
    return seen;
  }

  /** Final stop: SIGTERM (graceful), then no restart ever. */
  async stop(timeoutMs = 15_000): Promise<void> {
    this.stopped = true;
    await this.kill('SIGTERM', timeoutMs);
  }
}
