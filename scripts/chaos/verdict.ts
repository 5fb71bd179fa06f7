import { openCaseFile, type CaseFile } from './case-file.ts';
import { checkResult, type CheckResult } from './checks.ts';
import type { JudgeInput } from './evidence.ts';
import { deliveriesOwed } from './mail.ts';
import { clientsFindBookings, idempotency, no500, noOverlaps } from './rules/clients.ts';
import { deadOnlyBounces, lostMail, nothingLost, noStrayMail, strayMail } from './rules/mail.ts';
import { drained, eventsInOutbox, nothingPending, pendingAtEnd } from './rules/outbox.ts';
import { eventsPath, faultsOneAtATime, noCrash, somethingToJudge, webhooks } from './rules/run.ts';

/*
 * The chaos run's judge: a pure function from what was gathered (evidence.ts) to the list of
 * checks and the verdict. The rules live under rules/, by what they judge, each finding what
 * breaks its invariant in the case file (case-file.ts: the evidence and the views of it the rules
 * share); the table below names the invariants and runs them in order. The verdict is `every
 * check ok`, computed from the final list: there is no check that is reported but not counted.
 */

/**
 * The rules, in the order of the report: an invariant and what breaks it in the case file, one
 * row each; or a function making several rows.
 */
const RULES: ([invariant: string, violations: (c: CaseFile) => string[]] | ((c: CaseFile) => CheckResult[]))[] = [
  [
    'the run had something to judge: bookings, cancellations, emails and every kind of fault (with evidence) at the minimum for its duration; no client gave up',
    somethingToJudge,
  ],
  ['every booking has exactly its events in the outbox (same transaction)', eventsInOutbox],
  [
    'every booking and every cancellation: guest and host emails delivered to the right address (zero lost; matched on Message-ID and recipient)',
    nothingLost,
  ],
  [
    'no email to anyone else, and none about anything that did not happen (every accepted Message-ID and recipient match a booking)',
    noStrayMail,
  ],
  ["the 550 recipients' messages are DEAD with last_error, and nothing else is DEAD", deadOnlyBounces],
  ['the outbox ends with nothing PENDING', nothingPending],
  ['the workers drain within the bound', drained],
  ['no two confirmed bookings overlap (SQL self-join)', noOverlaps],
  ['every client that got a 201 finds its booking (GET /bookings/:id and the database), as it was told', clientsFindBookings],
  ['no request got a 500', no500],
  ['no process crashed (a worker refusing to start while Postgres is down, or the consumer while NATS is, is allowed)', noCrash],
  ['the same Idempotency-Key sent twice at once gets the same answer (one booking, replayed)', idempotency],
  ['never two faults on one target at once', faultsOneAtATime],
  eventsPath,
  webhooks,
];

export function judge(input: JudgeInput) {
  const c = openCaseFile(input);
  const checks = RULES.flatMap((rule) => (typeof rule === 'function' ? rule(c) : checkResult(rule[0], rule[1](c))));
  const byTopicStatus: Record<string, number> = {};
  for (const m of input.outbox) byTopicStatus[`${m.topic} ${m.status}`] = (byTopicStatus[`${m.topic} ${m.status}`] ?? 0) + 1;
  const pending = pendingAtEnd(c);
  return {
    ok: checks.every((x) => x.ok),
    checks,
    minimums: c.minimums,
    mail: mailFigures(c),
    outbox: {
      byTopicStatus,
      dead: input.outbox.filter((m) => m.status === 'DEAD').length,
      pendingHandled: pending.handled.length,
      pendingUnhandled: pending.unhandled.length,
    },
    bookings: {
      total: input.bookings.length,
      confirmed: input.bookings.filter((b) => b.status === 'confirmed').length,
      cancelled: input.bookings.filter((b) => b.status === 'cancelled').length,
    },
    faults: { planned: input.faultsPlanned, withEvidence: c.withEvidence, withoutEffect: input.faults.filter((f) => !f.evidence).length },
    /** The emails' pace during NATS outages against beside them (null: the events part did not run). */
    emailPace: c.pace?.figures ?? null,
  };
}

export type ChaosVerdict = ReturnType<typeof judge>;

function mailFigures(c: CaseFile) {
  const { byKey } = c.expected;
  const { copies } = c.accepted;
  const dupCounts = [...copies.entries()]
    .filter(([k]) => byKey.has(k))
    .map(([, n]) => n)
    .filter((n) => n > 1);
  const stray = strayMail(c);
  return {
    // (Message-ID, recipient) pairs owed, 550 recipients excluded; deliveries: copies included.
    expected: deliveriesOwed(c.expected),
    delivered: [...byKey.entries()].filter(([k, e]) => !e.bounces && copies.has(k)).length,
    deliveries: c.accepted.deliveries,
    duplicates: dupCounts.reduce((s, n) => s + n - 1, 0),
    duplicatedMessages: dupCounts.length,
    lost: lostMail(c).length,
    unexpected: stray.unexpected.length,
    wrongRecipient: stray.wrongRecipient.length,
    refusedPermanently: [...byKey.values()].filter((e) => e.bounces).length,
    refused451: c.accepted.refused451,
    refused550: c.accepted.refused550,
  };
}
