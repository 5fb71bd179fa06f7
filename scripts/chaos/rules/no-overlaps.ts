import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';

/** Rule: no two confirmed bookings of a property overlap (the rows of gather.ts's SQL self-join). */
export function noOverlaps(c: CaseFile): CheckResult {
  return checkResult(
    'no two confirmed bookings overlap (SQL self-join)',
    c.input.overlaps.map((r) => `${r.a} overlaps ${r.b} (property ${r.propertyId})`),
  );
}
