import { existsSync, readFileSync } from 'node:fs';
import type { UnplannedExit } from './evidence.ts';

/*
 * PostgreSQL's own crashes, read from its log: a backend that dies of a signal makes the server
 * reset every connection and recover, which the product rides out (its pools reconnect, its
 * claims come due again), so nothing else in the run would show it. The faults never kill a
 * backend with a signal (pg-restart is a clean stop, pg-terminate-workers a pg_terminate_backend,
 * which ends the backend without a signal), so every such line is a crash.
 *
 *   2026-12-03 22:24:35.849 UTC [20897] LOG:  client backend (PID 21083) was terminated by signal 11: Segmentation fault
 *   2026-12-03 22:24:35.849 UTC [20897] DETAIL:  Failed process was running: <its statement>
 */
const CRASH = /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC \[\d+\] LOG:\s+(.+ \(PID \d+\) was terminated by signal (\d+)[^\n]*)$/;

export function postgresCrashes(logText: string): UnplannedExit[] {
  const lines = logText.split('\n');
  const out: UnplannedExit[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = CRASH.exec(lines[i]!);
    if (!m) continue;
    const detail = lines[i + 1]?.includes('DETAIL:') ? [`${lines[i + 1]!.replace(/^.*DETAIL:\s+/, '')} ${lines[i + 2]?.trim() ?? ''}`] : [];
    out.push({
      process: 'postgres',
      at: Date.parse(`${m[1]!.replace(' ', 'T')}Z`),
      code: null,
      signal: `signal ${m[3]}`,
      lastLines: [m[2]!, ...detail],
    });
  }
  return out;
}

/** The crashes in the server's log file (none when it is missing: the run used another server). */
export function postgresCrashesIn(logFile: string): UnplannedExit[] {
  return existsSync(logFile) ? postgresCrashes(readFileSync(logFile, 'utf8')) : [];
}
