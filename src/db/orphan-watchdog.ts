import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

/*
 * A server we start that is not a node process (the embedded PostgreSQL, a nats-server, a
 * pgbouncer) cannot carry a lifeline (src/process/lifeline.ts): when the process that started it is SIGKILLed, it runs on,
 * orphaned, holding its port and its data folder until somebody finds it. `guardChild` starts a
 * watchdog beside it: a bare `node -e` process (no tsx, ~40 ms to start) that polls this process
 * and the server every 250 ms, and when this process is gone sends the server its stop signals
 * in turn. It exits as soon as the server has gone, whoever stopped it.
 *
 * The watchdog is in a process group of its own: a signal to this process's group (a terminal's
 * Ctrl-C, a CI time limit) must not take it away before it has done its one job. Both processes
 * are known by pid *and* /proc start time, so a pid reused by another process is never signalled.
 * Without /proc (not Linux) the watchdog sees no server and exits at once: no guard, no harm.
 */

/** The /proc start time of `pid`, or undefined when it is gone or there is no /proc (as lifeline.ts reads it). */
function startTimeOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

export interface StopStep {
  signal: NodeJS.Signals;
  /** Sent this long after this process was seen gone, if the server still runs. */
  afterMs: number;
}

export interface GuardOptions {
  /** Default: SIGTERM at once, SIGKILL 10 s later. */
  steps?: StopStep[];
  intervalMs?: number;
}

// Plain CommonJS for `node -e`: the watchdog must start without a loader, also from the built code.
const WATCHDOG = `// stayhub watchdog: stops a server when the process that started it is gone (src/db/orphan-watchdog.ts)
const fs = require('fs');
const o = JSON.parse(process.argv[1]);
const startTime = (pid) => {
  try {
    const stat = fs.readFileSync('/proc/' + pid + '/stat', 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return f[0] === 'Z' || f[0] === 'X' ? undefined : f[19];
  } catch {
    return undefined;
  }
};
const running = (p) => startTime(p.pid) === p.startTime;
const targetGone = () => !running(o.target) && process.exit(0);
const poll = setInterval(() => {
  targetGone();
  if (running(o.owner)) return;
  clearInterval(poll);
  const send = (signal) => {
    try {
      if (running(o.target)) process.kill(o.target.pid, signal);
    } catch {}
  };
  for (const s of o.steps) setTimeout(() => send(s.signal), s.afterMs);
  setInterval(targetGone, 50);
}, o.intervalMs);
`;

/**
 * Stops process `pid` (a server this process started) when this process goes, SIGKILLed included.
 * Call it right after the spawn. A normal stop needs nothing more: the watchdog sees the server
 * gone and exits.
 */
export function guardChild(pid: number, opts: GuardOptions = {}): void {
  const owner = { pid: process.pid, startTime: startTimeOf(process.pid) };
  const target = { pid, startTime: startTimeOf(pid) };
  if (owner.startTime === undefined || target.startTime === undefined) return; // no /proc, or the server already exited
  const steps = opts.steps ?? [
    { signal: 'SIGTERM', afterMs: 0 },
    { signal: 'SIGKILL', afterMs: 10_000 },
  ];
  const args = JSON.stringify({ owner, target, steps, intervalMs: opts.intervalMs ?? 250 });
  const watchdog = spawn(process.execPath, ['-e', WATCHDOG, args], { detached: true, stdio: 'ignore' });
  watchdog.unref();
}
