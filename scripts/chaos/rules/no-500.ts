import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';

/** Rule: no request was answered 500 (the clients kept every 5xx they saw). */
export function no500(c: CaseFile): CheckResult {
  return checkResult(
    'no request got a 500',
    c.input.serverErrors.map((e) => `${new Date(e.at).toISOString()} ${e.route} ${e.status} ${e.body.slice(0, 200)}`),
  );
}
