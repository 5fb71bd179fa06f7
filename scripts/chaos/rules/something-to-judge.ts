import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';
import { FAULT_KINDS } from '../fault-kinds.ts';
import { deliveriesOwed } from '../mail.ts';

/**
 * Rule: something to judge. An empty or stalled run proves nothing and must not pass: bookings,
 * cancellations, emails and faults with evidence at the minimum for its duration (minimums.ts),
 * and no client request abandoned (what it was told is unknown).
 */
export function somethingToJudge(c: CaseFile): CheckResult {
  const { input, minimums: min, withEvidence } = c;
  const v: string[] = [];
  const cancellations = input.bookings.filter((b) => b.status === 'cancelled').length;
  const expectedCount = deliveriesOwed(c.expected);
  if (input.bookings.length < min.bookings)
    v.push(`${input.bookings.length} bookings in the database; at least ${min.bookings} needed for a ${input.durationSeconds} s run`);
  if (input.clientBookings.length < min.bookings)
    v.push(`clients were answered 201 for ${input.clientBookings.length} bookings; at least ${min.bookings} needed`);
  if (cancellations < min.cancellations) v.push(`${cancellations} cancelled bookings; at least ${min.cancellations} needed`);
  if (expectedCount < min.emailsExpected) v.push(`${expectedCount} emails expected; at least ${min.emailsExpected} needed`);
  for (const k of FAULT_KINDS) {
    if (withEvidence[k] < min.faults[k]) {
      v.push(
        `${withEvidence[k]} ${k} fault(s) with evidence of their effect (planned ${input.faultsPlanned[k] ?? 0}); at least ${min.faults[k]} needed`,
      );
    }
  }
  if (input.clientsGaveUp > 0) v.push(`${input.clientsGaveUp} client request(s) gave up: what they were told is unknown`);
  return checkResult(
    'the run had something to judge: bookings, cancellations, emails and every kind of fault (with evidence) at the minimum for its duration; no client gave up',
    v,
  );
}
