import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { ROOT } from '../../lib/processes.ts';

/** Which code ran: HEAD, and whether the working tree had uncommitted changes (any file). */
export function codeVersion(): { commit: string | null; dirty: boolean | null; dirtyFiles: string[] } {
  try {
    const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString();
    const status = git('status', '--porcelain', '--untracked-files=no').split('\n').filter(Boolean);
    return { commit: git('rev-parse', 'HEAD').trim(), dirty: status.length > 0, dirtyFiles: status.slice(0, 20).map((l) => l.slice(3)) };
  } catch {
    // Not a git checkout (a `git archive` snapshot): the caller may say which commit it is.
    const commit = process.env.BENCH_CODE_COMMIT ?? null;
    return { commit, dirty: commit ? false : null, dirtyFiles: [] };
  }
}

/** The 1-minute load average before a section, and whether it exceeded the cores (a noisy section). */
export function loadBefore(): { loadAverage1m: number; cores: number; overloaded: boolean } {
  const load = Math.round(os.loadavg()[0]! * 100) / 100;
  const cores = os.cpus().length;
  return { loadAverage1m: load, cores, overloaded: load > cores };
}
