import { lc, type JudgeInput } from './evidence.ts';
import { countByKind } from './fault-kinds.ts';
import { acceptedMail, expectedMail } from './mail.ts';
import { minimums } from './minimums.ts';
import { emailPace } from './rules/email-pace.ts';

/*
 * The case file the judge hands every rule: the gathered evidence, and the views of it that more
 * than one rule (or the verdict's figures) read, each worked out once. Nothing here judges.
 */

export function openCaseFile(input: JudgeInput) {
  // The 550 recipients, lower case.
  const bounce = new Set(input.bounceEmails.map(lc));
  return {
    input,
    bounce,
    bookingById: new Map(input.bookings.map((b) => [b.publicId, b])),
    expected: expectedMail(input.bookings, input.clientBookings, bounce, input.mailDomain),
    accepted: acceptedMail(input.records),
    // Faults with evidence of their effect, by kind.
    withEvidence: countByKind(input.faults.filter((f) => f.evidence)),
    minimums: minimums(input.durationSeconds, input.faultsPlanned, input.events !== null),
    // Judged from the clients' and the SMTP server's records, when the events part ran.
    pace: input.events ? emailPace(input) : null,
  };
}

export type CaseFile = ReturnType<typeof openCaseFile>;
