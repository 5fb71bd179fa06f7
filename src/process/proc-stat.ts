import { readFileSync } from 'node:fs';

/**
 * The fields of /proc/<pid>/stat after the command name, which may hold spaces and parentheses
 * (so they start after its last ')'): index 0 is the state, 1 the parent's pid, 11–14 the CPU
 * ticks (own and reaped children's), 19 the start time. Undefined when the process is gone or
 * there is no /proc (not Linux).
 */
export function procStat(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}
