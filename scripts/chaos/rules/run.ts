import type { CaseFile } from '../case-file.ts';
import { checkResult, EVENT_CHECKS, WEBHOOK_CHECKS, type CheckResult } from '../checks.ts';
import { FAULT_KINDS, type FaultOutcome } from '../fault-kinds.ts';
import { deliveriesOwed } from '../mail.ts';

/* The rules on the run itself: enough to judge, no crash, the faults as said, every check made. */

/**
 * Something to judge. An empty or stalled run proves nothing and must not pass: bookings,
 * cancellations, emails and faults with evidence at the minimum for its duration (minimums.ts),
 * and no client request abandoned (what it was told is unknown).
 */
export const somethingToJudge = (c: CaseFile): string[] => {
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
  return v;
};

/**
 * How long after a NATS outage's end a consumer's "cannot reach NATS" exit is still put down to it:
 * a start that began while the server was down connects (3 s timeout) after it came back.
 */
const NATS_REFUSAL_SLACK_MS = 5_000;

/**
 * No process crashed on its own, PostgreSQL's backends included (read from its log:
 * ../postgres-crashes.ts). The allowed exits: a worker restarted while Postgres is
 * down refuses to start (exit 1, "cannot reach the database"); the earnings consumer started
 * while nats-server is down (a NATS outage with evidence, or just after one) refuses to start
 * (exit 1, "cannot reach NATS"). Their manager starts them again.
 */
export const noCrash = (c: CaseFile): string[] => {
  const v: string[] = [];
  const natsDown = c.input.faults.filter((f) => f.kind === 'nats-outage' && f.evidence);
  for (const e of c.input.unplannedExits) {
    const refusedToStart = e.code === 1 && e.lastLines.some((l) => l.includes('cannot reach the database'));
    const refusedWhileNatsDown =
      e.code === 1 &&
      e.lastLines.some((l) => l.includes('cannot reach NATS')) &&
      e.at !== undefined &&
      natsDown.some((f) => e.at! >= f.startedAt && e.at! <= f.endedAt + NATS_REFUSAL_SLACK_MS);
    if (!refusedToStart && !refusedWhileNatsDown)
      v.push(`${e.process} exited on its own (code ${e.code ?? e.signal}): ${e.lastLines.join(' / ').slice(0, 600)}`);
  }
  return v;
};

export const faultsOneAtATime = (c: CaseFile): string[] => {
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
  return v;
};

/** The checks made, each required name that is not among them first, as broken. */
function required(names: string[], made: CheckResult[]): CheckResult[] {
  const have = new Set(made.map((c) => c.name));
  return [...names.filter((n) => !have.has(n)).map((n) => checkResult(n, ['this check was not made'])), ...made];
}

/**
 * The events path, when it ran: each of its checks (EVENT_CHECKS: events/check.ts's, and the
 * email pace judged here from the clients' and the SMTP server's records) is in the final list;
 * one that was not made is broken, not skipped.
 */
export function eventsPath(c: CaseFile): CheckResult[] {
  if (!c.input.events || !c.pace) return [];
  return required(Object.values(EVENT_CHECKS), [...c.input.events.checks, c.pace.check]);
}

/** The webhooks' checks (WEBHOOK_CHECKS, made by webhooks.ts) are each in the final list. */
export function webhooks(c: CaseFile): CheckResult[] {
  return required(Object.values(WEBHOOK_CHECKS), c.input.webhooks.checks);
}
