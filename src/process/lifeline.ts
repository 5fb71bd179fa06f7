import { readFileSync, writeSync } from 'node:fs';
import { procStat } from './proc-stat.ts';

/*
 * A long-running process must stop gracefully when whoever started it goes away, however it was
 * started. Three cases leave it running with nobody to stop it:
 *
 * - `npm run …` / `npm start`: npm does not pass SIGTERM on. `kill -TERM <npm>` makes npm exit at
 *   once; npm runs the script through `sh -c`, which dies with it (or, if npm was SIGKILLed, stays
 *   waiting), and node lives on, orphaned. The container or the terminal that stopped npm believes
 *   the service stopped; the worker is then SIGKILLed later with its messages in flight.
 * - `npm start`'s children (src/commands/start.ts opens an IPC channel to each): the supervisor died
 *   without stopping them.
 * - a harness (the chaos run, the bench, a test run) SIGKILLed, or stopped by a time limit that
 *   signals only it: the processes it started, detached, run on.
 *
 * So, when npm started us: we note our parent at start (and, when the parent is the shell npm runs
 * scripts through, the shell's parent, i.e. npm) and poll them; an IPC channel's disconnect is
 * watched too, however we were started; and a harness puts `lifelineEnv()` into its children's
 * environment (STAYHUB_LIFELINE: its pid and start time), which we poll too (and so does whatever
 * we start with that environment). When one of them is gone, `stop` runs once — the entry point
 * passes the same graceful stop as SIGTERM.
 *
 * Polling, because Node has no prctl(PR_SET_PDEATHSIG); a read of our own ppid and of one /proc
 * file every 250 ms costs nothing measurable. A process whose parent is init (PID 1 in a
 * container: ppid 0; a systemd service: ppid 1) has nobody to lose and is not watched.
 *
 * npm can also be gone before this module has loaded (killed while node and tsx start, which takes
 * a second or more): we were orphaned before the parent could be noted, and our parent (or the
 * shell's, after a SIGKILL to npm) is already init. Started by npm, that is a parent gone, and the
 * process stops as soon as its lifeline is armed, unless PID 1 is the npm itself (a container
 * whose command is `npm run …`).
 */

export interface LifelineOptions {
  /** Written into the two log lines (`name` field), like the pino loggers' name. */
  name: string;
  /** How often the ancestors are checked (default 250 ms). */
  intervalMs?: number;
}

export interface Lifeline {
  /** Stop watching (the work is done; the process is about to exit on its own). */
  dispose(): void;
}

const SHELLS = new Set(['sh', 'dash', 'bash', 'zsh', 'ash', 'busybox']);

export interface Ancestor {
  pid: number;
  /** /proc start time: tells our ancestor from a new process that reused its pid. */
  startTime?: string;
}

function procComm(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

function describe(pid: number): Ancestor {
  // Field 22 of stat is the start time; after the name, index 19.
  return { pid, startTime: procStat(pid)?.[19] };
}

/** Gone: no such process, a zombie waiting to be reaped, or its pid now belongs to another process. */
function isGone(a: Ancestor): boolean {
  const stat = procStat(a.pid);
  if (stat) return stat[0] === 'Z' || stat[0] === 'X' || (a.startTime !== undefined && stat[19] !== a.startTime);
  try {
    process.kill(a.pid, 0); // no /proc (not Linux): existence only
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'EPERM';
  }
}

/** One JSON line on stderr, shaped like our pino lines; synchronous so it survives process exit. */
function logLine(level: number, name: string, msg: string, fields: Record<string, unknown>) {
  try {
    writeSync(2, `${JSON.stringify({ level, time: Date.now(), pid: process.pid, name, ...fields, msg })}\n`);
  } catch {
    // stderr closed: nobody is reading, nothing to tell.
  }
}

/** The variable `lifelineEnv()` sets: `<pid>:<start time>` of the process whose end must stop us. */
const LIFELINE_ENV = 'STAYHUB_LIFELINE';

/**
 * PID 1 is npm (or the node running it, or another package manager): a container whose command is
 * `npm run …`. Our parent being PID 1 then means npm started us and lives, not that we were orphaned.
 */
function initIsNpm(): boolean {
  return /^(npm|node|yarn|pnpm)\b/.test(procComm(1) ?? '');
}

/** STAYHUB_LIFELINE's process, or undefined when it is unset or not `<pid>:<start time>`. */
export function parseLifelineEnv(value: string | undefined): Ancestor | undefined {
  const m = /^(\d+):(\d+)$/.exec(value ?? '');
  const pid = Number(m?.[1]);
  return m && pid > 1 ? { pid, startTime: m[2] } : undefined;
}

/**
 * Who started us, noted when this module loads (before the entry point's slow start-up: a parent
 * that dies while we connect to the database is still noticed at the first poll).
 */
const startedBy: { parent: number | undefined; ancestors: Ancestor[]; goneBeforeArmed?: Record<string, unknown> } = (() => {
  let parent: number | undefined;
  let goneBeforeArmed: Record<string, unknown> | undefined;
  const ancestors: Ancestor[] = [];
  // Only under npm (it sets npm_lifecycle_event for the script it runs): a process started with
  // `node … &` from a shell that then exits keeps the usual meaning and runs on.
  if (process.env.npm_lifecycle_event && process.pid !== 1) {
    if (process.ppid > 1) {
      parent = process.ppid;
      ancestors.push(describe(parent));
      // npm runs a script as `sh -c "<script>"`; dash does not exec the last command, so the shell
      // is our parent and npm is its parent. A SIGKILLed npm leaves the shell alive: watch npm too.
      const comm = procComm(parent);
      const grandparent = Number(procStat(parent)?.[1]);
      if (comm && SHELLS.has(comm)) {
        if (grandparent > 1) ancestors.push(describe(grandparent));
        else if (!initIsNpm()) goneBeforeArmed = { shellPid: parent, shellParentPid: grandparent };
      }
    } else if (!initIsNpm()) {
      goneBeforeArmed = { parentPid: process.ppid };
    }
  }
  const harness = parseLifelineEnv(process.env[LIFELINE_ENV]);
  if (harness && harness.pid !== process.pid) ancestors.push(harness);
  return { parent, ancestors, goneBeforeArmed };
})();

/**
 * For the environment of a child process: the child (any entry point run by runMain, or one that
 * calls onParentGone itself) stops as on SIGTERM when this process goes, however it goes. The
 * start time tells this process from a later one that reuses its pid.
 */
export function lifelineEnv(): Record<string, string> {
  return { [LIFELINE_ENV]: `${process.pid}:${describe(process.pid).startTime ?? 0}` };
}

/**
 * Calls `stop` once when the process that started us goes away (see the header). `stop` must be
 * the entry point's graceful shutdown and must do nothing when a shutdown is already under way (a
 * Ctrl-C reaches both npm and node: node starts draining, then npm's exit must not count as a
 * second signal).
 */
export function onParentGone(stop: () => void, opts: LifelineOptions): Lifeline {
  const { parent, ancestors, goneBeforeArmed } = startedBy;
  let fired = false;
  let timer: NodeJS.Timeout | undefined;
  const fire = (reason: string, fields: Record<string, unknown>) => {
    if (fired) return;
    fired = true;
    dispose();
    logLine(40, opts.name, `${reason}: stopping as on SIGTERM`, fields);
    // Nobody is left to collect our exit status: say it.
    process.once('exit', (code) => logLine(code === 0 ? 30 : 50, opts.name, 'exited after its parent went away', { exitCode: code }));
    stop();
  };
  const onDisconnect = () => fire('the supervisor closed its IPC channel', {});

  if (goneBeforeArmed) {
    // After the caller has finished arming (its stop must be ready to run).
    setImmediate(() => fire('parent process gone before the lifeline was armed (npm exited while this process started)', goneBeforeArmed));
  } else if (ancestors.length) {
    timer = setInterval(() => {
      if (parent !== undefined && process.ppid !== parent) return fire('parent process gone', { parentPid: parent });
      const gone = ancestors.find(isGone);
      if (gone) fire('parent process gone', { parentPid: gone.pid });
    }, opts.intervalMs ?? 250);
    timer.unref(); // the watch must never keep a finished process alive
  }
  // Only the IPC channel that `npm start` opens (it sets STAYHUB_SUPERVISED): a channel from any
  // other parent (a vitest fork running an entry point's main in-process) is not ours to unref.
  if (process.env.STAYHUB_SUPERVISED === '1' && process.send && process.channel) {
    process.channel.unref();
    process.once('disconnect', onDisconnect);
  }

  function dispose() {
    fired = true; // a stop scheduled before the command finished must not run after it
    if (timer) clearInterval(timer);
    timer = undefined;
    process.off('disconnect', onDisconnect);
  }
  return { dispose };
}
