import { writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { EVENT_FAULT_KINDS, FAULT_KINDS, KINDS } from './fault-kinds.ts';
import type { ChaosResults } from './results.ts';
import { seconds as s, type PaceFigures } from './rules/email-pace.ts';

/*
 * The short markdown report written beside chaos-results.json (and printed at the end of a run):
 * what ran, every invariant's result, the figures, the minimums, the faults, and what broke.
 */

type R = ChaosResults;

function head(r: R): string[] {
  return [
    `## Chaos run: ${r.ok ? 'PASS' : 'FAIL'} (seed ${r.seed}, ${r.durationSeconds} s of load${r.settings.outboxWrites === 'wal' ? ', OUTBOX_WRITES=wal' : ''})`,
    '',
    `Started ${r.startedAt}; ${r.wallSeconds} s wall clock; ${r.machine.cpus} CPUs, Node ${r.machine.node}; code ${r.code.commit?.slice(0, 10) ?? 'unknown'}${r.code.srcDirty ? ' (with uncommitted changes in src/)' : ''}.`,
    '',
    r.events.covered
      ? 'Events path covered: the workers relay the outbox into NATS JetStream, the earnings consumer reads it; both are faulted and checked.'
      : `**Events path NOT covered** (no JetStream relay, consumer, faults or checks in this run): ${r.events.skipped}.`,
    '',
  ];
}

function invariants(r: R): string[] {
  return [
    '| Invariant | Result |',
    '|---|---|',
    ...r.checks.map((c) => `| ${c.name} | ${c.ok ? (c.note ? `held (${c.note})` : 'held') : `**BROKEN** (${c.violationCount})`} |`),
  ];
}

/** The figures: the load, the faults (the events kinds when that part ran), the mail, the outbox and the drain. */
function figureRows(r: R): string[] {
  const f = r.figures;
  const m = f.mail;
  const kinds = r.events.covered ? FAULT_KINDS : FAULT_KINDS.filter((k) => !EVENT_FAULT_KINDS.includes(k));
  return [
    `| bookings made (201) | ${f.bookingsMade} |`,
    `| bookings in the database (confirmed / cancelled) | ${f.bookingsInDatabase.total} (${f.bookingsInDatabase.confirmed} / ${f.bookingsInDatabase.cancelled}) |`,
    `| booking attempts / 409 dates_unavailable / overlap storms | ${f.load.bookingAttempts} / ${f.load.conflicts409} / ${f.load.overlapStorms} |`,
    `| requests sent (incl. client retries) / retries / gave up | ${f.requests} / ${f.clientRetries} / ${f.load.gaveUp} |`,
    `| double submits (same Idempotency-Key twice at once) / answers replayed | ${f.load.doubleSubmits} / ${f.load.replays} |`,
    ...kinds.map(
      (k) =>
        `| faults with evidence / planned: ${KINDS[k].report} | ${f.faults[k]} / ${f.faultsPlanned[k]}${k === 'worker-kill' ? ` (${f.workerKillsMidHandlers})` : ''} |`,
    ),
    `| faults carried out with no effect seen (not counted) | ${f.faultsWithoutEffect} |`,
    `| SMTP 451 answers (share ${r.settings.tempFailRate}) / 550 answers | ${m.refused451} / ${m.refused550} |`,
    `| emails expected (Message-ID, recipient) / delivered / lost | ${m.expected} / ${m.delivered} / ${m.lost} |`,
    `| emails to a wrong recipient | ${m.wrongRecipient} |`,
    `| duplicates delivered (extra copies; messages affected) | ${m.duplicates} (${m.duplicatedMessages}) |`,
    `| emails about nothing (unexpected Message-IDs) | ${m.unexpected} |`,
    `| DEAD messages (all to the ${r.settings.bounceRecipients} 550 recipients) | ${f.outbox.dead} |`,
    `| PENDING at the end (handled topics / topics without a handler) | ${f.outbox.pendingHandled} / ${f.outbox.pendingUnhandled} |`,
    `| drain time after the load stopped | ${f.drainSecondsAfterLoad ?? 'not drained'} s |`,
    `| from the last fault to steady state (oldest pending ≤ 5 s) | ${f.secondsFromLastFaultToSteadyState ?? 'n/a'} s |`,
    `| max age of the oldest pending message (sampled each second) | ${f.maxOldestPendingAgeSeconds} s (at +${f.maxOldestPendingAtSeconds ?? '?'} s) |`,
    `| max PENDING messages | ${f.maxPending} |`,
  ];
}

/** The email pace: the isolated NATS outage closest to its limit, then each one. */
function paceRows(pace: NonNullable<R['emailPace']>): string[] {
  const cell = (p: PaceFigures) =>
    `${s(p.during.p95Ms)} (${p.during.n}) / ${s(p.beside.p95Ms)} (${p.beside.n}) / ${p.judged ? s(p.limitMs) : 'not judged: too few emails'}`;
  return [
    ...(['bookings', 'cancellations'] as const).map(
      (k) =>
        `| email pace, ${k}: p95 during the isolated NATS outage closest to its limit (emails) / in the 20 s beside it (emails) / limit | ${cell(pace[k])} |`,
    ),
    ...pace.outages.map(
      (o) =>
        `| email pace, isolated NATS outage at ${new Date(o.startedAt).toISOString()}: bookings; cancellations (as above) | ${cell(o.bookings)}; ${cell(o.cancellations)} |`,
    ),
  ];
}

/** The events path's, the email pace's and the webhooks' figures, when each ran. */
function pathRows(r: R): string[] {
  const e = r.events.covered ? r.events.figures : null;
  return [
    ...(e
      ? [
          `| booking events: in the outbox / in the JetStream stream (copies included) | ${e.bookingEventsInOutbox} / ${e.bookingMessagesInStream} |`,
          `| booking events relayed before a stream deletion, gone with it | ${e.goneWithDeletedStream} (${e.streamDeletions} deletion(s)) |`,
          `| earnings ledger lines (host, currency) / consumer dead letters | ${e.ledgerLines} / ${e.deadLetters} |`,
          `| forged events published / refused (dead letter) / applied / gone from the stream unread | ${e.forged} / ${e.forgedRefused} / ${e.forgedApplied} / ${e.forgedGone} |`,
          `| bookings / cancellations the ledger does not count | ${e.uncountedBookings} / ${e.uncountedCancellations} |`,
          `| bookings counted from the bookings table, their creation never read (audit or cancellation first) | ${e.countedAsGaps} |`,
        ]
      : []),
    ...(r.emailPace ? paceRows(r.emailPace) : []),
    ...(r.webhooks
      ? [
          `| webhook events owed (endpoint, event) / received signed | ${r.webhooks.owed} / ${r.webhooks.receivedValid} (${r.webhooks.endpoints} endpoints) |`,
          `| webhook requests: flaky (30 % 500) / down (${r.webhooks.downWindowSeconds} s refused) / slow | ${r.webhooks.requests.flaky} / ${r.webhooks.requests.down} / ${r.webhooks.requests.slow} |`,
        ]
      : []),
  ];
}

/** Below the tables: minimums, the faults' times, the slowest messages, unplanned exits, violations. */
function notes(r: R): string[] {
  const f = r.figures;
  const mn = r.minimums;
  const perKind = Object.entries(mn.faults).filter(([, n]) => n > 0);
  const exits = Object.entries(f.unplannedExits).flatMap(([n, list]) => list.map((e) => ({ n, ...e })));
  const broken = r.checks.filter((c) => !c.ok);
  return [
    '',
    `Minimums for a ${r.durationSeconds} s run (below them the verdict is FAIL): ${mn.bookings} bookings, ${mn.cancellations} cancellations, ${mn.emailsExpected} emails expected, faults with evidence per kind ${perKind.map(([k, n]) => `${k} ${n}`).join(', ')}; no client gave up.`,
    '',
    `Faults (seconds into the load): ${r.faults.map((x) => `${x.kind} +${x.atSeconds}${x.evidence ? '' : ' (no effect)'}`).join(', ')}.`,
    // What was seen of a fault that showed no effect: why a run fell below its minimums.
    ...r.faults.filter((x) => !x.evidence).map((x) => `- ${x.kind} +${x.atSeconds}, no effect seen: ${x.detail}`),
    ...(f.slowestMessages.length ? ['', 'Slowest messages (commit to DONE/DEAD):'] : []),
    ...f.slowestMessages.map(
      (m) =>
        `- ${m.topic} ${m.status} after ${m.seconds} s, ${m.attempts} attempts${m.lastError ? `; last error: ${m.lastError.slice(0, 160)}` : ''}`,
    ),
    ...(exits.length ? ['', 'Unplanned exits (the harness restarted each):'] : []),
    ...exits.map((e) => `- ${e.n} at ${e.at}, code ${e.code ?? e.signal}: ${(e.lastLines.at(-1) ?? '').slice(0, 200)}`),
    ...(broken.length ? ['', '### Violations (first ten of each)'] : []),
    ...broken.flatMap((c) => ['', `**${c.name}**`, ...c.violations.map((v) => `- ${v}`)]),
    '',
    `Reproduce: \`npm run chaos -- --duration ${r.durationSeconds} --seed ${r.seed}${r.settings.outboxWrites === 'wal' ? ' --outbox-writes wal' : ''}\``,
    '',
  ];
}

export function renderMarkdown(r: R): string {
  return [...head(r), ...invariants(r), '', '| Figure | Value |', '|---|---|', ...figureRows(r), ...pathRows(r), ...notes(r)].join('\n');
}

/** Writes chaos-results.json and chaos-results.md to `out`; the markdown, to print. */
export function writeReport(out: string, results: ChaosResults): string {
  mkdirSync(out, { recursive: true });
  writeFileSync(path.join(out, 'chaos-results.json'), `${JSON.stringify(results, null, 2)}\n`);
  const md = renderMarkdown(results);
  writeFileSync(path.join(out, 'chaos-results.md'), md);
  return md;
}
