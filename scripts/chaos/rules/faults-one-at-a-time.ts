import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';
import type { FaultOutcome } from '../fault-kinds.ts';

/** Rule: the faults were what the run says: never two on one target at once. */
export function faultsOneAtATime(c: CaseFile): CheckResult {
  const v: string[] = [];
  const byTarget = new Map<string, FaultOutcome[]>();
  for (const f of c.input.faults) byTarget.set(f.target, [...(byTarget.get(f.target) ?? []), f]);
  for (const [target, list] of byTarget) {
    const s = [...list].sort((a, b) => a.startedAt - b.startedAt);
    for (let i = 1; i < s.length; i++) {
      if (s[i]!.startedAt < s[i - 1]!.endedAt)
        v.push(`${s[i]!.kind} on ${target} started while ${s[i - 1]!.kind} on it was still in progress`);
    }
  }
  return checkResult('never two faults on one target at once', v);
}
