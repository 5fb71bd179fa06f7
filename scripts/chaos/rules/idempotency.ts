import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';

/** Rule: the same Idempotency-Key sent twice at once got the same answer (the load's double submits). */
export function idempotency(c: CaseFile): CheckResult {
  return checkResult(
    'the same Idempotency-Key sent twice at once gets the same answer (one booking, replayed)',
    c.input.idempotencyMismatches,
  );
}
