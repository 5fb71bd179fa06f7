import { readdirSync } from 'node:fs';
import os from 'node:os';
import { procStat } from '../../../src/process/proc-stat.ts';

/*
 * CPU time of a local PostgreSQL server, read from /proc (Linux only; null elsewhere): the
 * postmaster's own, the children it has reaped (backends whose connection closed), and the living
 * children's. The webhooks section splits a delivery's cost between the sender, the receiver and
 * the database with it.
 */

const TICK_MICROS = 1_000_000 / 100; // USER_HZ: 100 on every Linux the bench runs on

/** utime, stime, cutime, cstime of one process, in ticks; null when it is gone. */
function times(pid: number): { ppid: number; own: number; reaped: number } | null {
  const f = procStat(pid);
  return f ? { ppid: Number(f[1]), own: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]) } : null;
}

/** The postmaster of the server a backend belongs to: the backend's parent. */
export function postmasterOf(backendPid: number): number | null {
  if (os.platform() !== 'linux') return null;
  return times(backendPid)?.ppid ?? null;
}

/** CPU µs the server has used so far, every process of it together; null off Linux or when it is gone. */
export function serverCpuMicros(postmasterPid: number | null): number | null {
  if (postmasterPid === null) return null;
  const root = times(postmasterPid);
  if (!root) return null;
  let ticks = root.own + root.reaped;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const t = times(Number(entry));
    if (t?.ppid === postmasterPid) ticks += t.own;
  }
  return ticks * TICK_MICROS;
}
