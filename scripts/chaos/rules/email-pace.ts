import { checkResult, EVENT_CHECKS } from '../checks.ts';
import { lc, type ClientRecord, type JudgeInput } from '../evidence.ts';
import type { FaultKind, FaultOutcome } from '../fault-kinds.ts';
import { acceptedMail, BOOKING_EMAILS, expectedMessageId, type BookingTopic } from '../mail.ts';

/*
 * Rule: emails kept their pace during NATS outages (EVENT_CHECKS.emailPace; judged only when the
 * events path ran, rules/run.ts's eventsPath puts it in the list).
 *
 * Like with like: only the isolated outages are judged (plan.ts marks one in three; the injector
 * starts no fault that holds mail up by itself from faults/injector.ts QUIET_MS before such an
 * outage until QUIET_MS after it), and each against the mail answered beside it, in that same
 * quiet stretch. The other outages are ringed by worker kills, terminations, restarts and node
 * kills, whose after-effects (a lease to wait out, one worker carrying the load, a queue to drain)
 * last longer than any span an email can be excluded by: measured on seeds 7 and 11 (600 s), the
 * mail answered in them went out 4.5× and 13.6× slower than beside them, while with NATS outages
 * alone (`--only-faults nats-outage`) it went out at 1.2× the pace beside them.
 *
 * Each isolated outage is judged on its own, not the run's outages pooled: a run's pace swings with
 * its backlog, and pooled samples compare one outage's mail with another's neighbours. Seed
 * 20261203 (600 s) failed pooled (p95 26.9 s during against 11.4 s beside) while each of its three
 * isolated outages went out at its neighbours' pace (0.65 s against 0.57 s; 30.9 s against 32.1 s
 * behind a backlog; 4.3 s against 11.4 s): the "during" pool was the backlogged outage's, the
 * "beside" pool mostly the quiet one's.
 */

/** How many emails of a kind must have been answered during NATS outages (and beside them) for the pace to be judged. */
export const PACE_MIN_DURING = 5;
export const PACE_MIN_BESIDE = 20;

/**
 * Faults that hold emails up by themselves, and the span around each (ms before its start, after
 * its end; a worker kill's end is the kill, within 3 s of its start) in which an email waiting is
 * delayed by them: a killed worker's or a severed connection's batch waits for its lease (5 s from
 * the claim, made within ~3 s before the kill); a restarted PostgreSQL stops every worker; an SMTP
 * outage is the emails' own downstream; a deleted stream holds the relay's slots for the 2 s it
 * waits before recreating the stream. An email whose wait (from its answer to its delivery)
 * overlaps one of these spans is in neither sample, so the comparison measures the NATS outage
 * alone. The wait, not only the answer: faults on one target queue behind each other, so a node
 * kill often starts the moment a NATS outage ends, and an email answered late in the outage then
 * waits through the election that follows (seed 42, 120 s: the slowest email "during" an outage,
 * 4.68 s, was answered 0.4 s before such a kill's span and delivered inside it).
 */
export const HOLDS_MAIL_UP: Partial<Record<FaultKind, [before: number, after: number]>> = {
  'worker-kill': [3_000, 1_000],
  'pg-terminate-workers': [3_000, 1_000],
  'pg-restart': [3_000, 5_000],
  'smtp-outage': [1_000, 5_000],
  'stream-delete': [1_000, 3_000],
  // A node lost: while the others elect a leader for the stream (seconds on a loaded machine), a
  // relay attempt may wait out its publish timeout before it fails.
  'nats-node-kill': [1_000, 10_000],
  'nats-node-wipe': [1_000, 10_000],
};
/** Outside a NATS outage means also not just before it or in the backoff after it. */
const NATS_OUTAGE_MARGIN: [before: number, after: number] = [1_000, 5_000];
/**
 * The emails an outage's are compared with: those answered within this long of it (outside its
 * margin). A run's pace swings with its backlog: a restarted PostgreSQL, an SMTP outage or a row
 * of worker kills leave a queue that takes a minute to drain, so an email answered then waits
 * tens of seconds whatever NATS does. Emails answered in the same stretch of the run, just
 * before and just after the outage, waited behind the same queue: measured on seed 20261203, the
 * emails answered during each outage went out at the pace of their neighbours (p95 54.6 s
 * against 58.6 s in the 15 s before and 51.1 s after one outage; 21.8 s against 43.9 s and 44.1 s
 * beside another), while the run's p95 over all other emails was set by its quiet first minutes.
 */
export const PACE_BESIDE_MS = 20_000;

const p95 = (xs: number[]): number | null => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.ceil(0.95 * s.length) - 1]!;
};

/**
 * Whether a NATS outage slowed the emails down: the workers relay every booking event beside its
 * emails, and a relay that held a worker's slot through its publish timeout (or a cancellation
 * that waited for its booking's relay to get through) would delay the mail of everything answered
 * during the outage. Compares, for bookings (from the 201) and cancellations (from the 200) apart,
 * the 95th percentile of the time to the SMTP server's acceptance of each of its emails, answered
 * during a NATS outage with evidence, with the same figure for those answered beside it (within
 * PACE_BESIDE_MS before or after, away from any fault that holds mail up by itself): the same
 * stretch of the run, behind the same backlog. The slack (twice the p95 beside, or 2 s more than it) absorbs a worker kill
 * that the exclusion windows miss; a blocked relay costs its publish timeout per attempt, and
 * piles the queue up by seconds within one outage.
 */
export function emailPace(input: Pick<JudgeInput, 'clientBookings' | 'records' | 'faults' | 'bounceEmails' | 'mailDomain'>) {
  const { perOutage, excluded } = paceSamples(input);
  const violations: string[] = [];
  const outages = perOutage.map(({ outage, samples }) => {
    const at = new Date(outage.startedAt).toISOString();
    return {
      startedAt: outage.startedAt,
      bookings: paceFigure('bookings', at, samples.bookings, violations),
      cancellations: paceFigure('cancellations', at, samples.cancellations, violations),
    };
  });
  // The judged outage closest to its limit (by p95 during / limit), or the run's samples pooled when none is judged.
  const headline = (which: Which): PaceFigures => {
    const judged = outages.map((o) => o[which]).filter((f) => f.judged);
    if (judged.length) return judged.reduce((a, b) => (b.during.p95Ms! / b.limitMs! > a.during.p95Ms! / a.limitMs! ? b : a));
    const pool = (side: 'during' | 'beside') => perOutage.flatMap((o) => o.samples[which][side]);
    return {
      during: { n: pool('during').length, p95Ms: p95(pool('during')) },
      beside: { n: pool('beside').length, p95Ms: p95(pool('beside')) },
      limitMs: null,
      judged: false,
    };
  };
  // `excluded`: emails in neither sample, answered around a fault that holds mail up by itself (HOLDS_MAIL_UP).
  const figures = { bookings: headline('bookings'), cancellations: headline('cancellations'), outages, excluded };
  const check = checkResult(EVENT_CHECKS.emailPace, violations);
  const unjudged = (['bookings', 'cancellations'] as const).filter((k) => !figures[k].judged);
  if (unjudged.length) {
    const what = unjudged.length === 2 ? 'not judged' : `${unjudged[0]} not judged`;
    check.note = `${what}: fewer than ${PACE_MIN_DURING} emails answered during any isolated NATS outage, or ${PACE_MIN_BESIDE} beside it, away from other faults`;
  }
  return { check, figures };
}

interface Sample {
  during: number[];
  beside: number[];
  slow: [number, string][];
}
type Which = 'bookings' | 'cancellations';

/** Each delivered email's wait from its answer, in the sample its answer falls in (or excluded). */
function paceSamples(input: Pick<JudgeInput, 'clientBookings' | 'records' | 'faults' | 'bounceEmails' | 'mailDomain'>) {
  const firstAccepted = acceptedMail(input.records).firstAt;
  const bounce = new Set(input.bounceEmails.map(lc));
  // A worker kill lands within 3 s of its start (the wait for a busy worker); while the worker is
  // down the other one carries the load, so only mail claimed before the kill waits for a lease.
  const end = (f: FaultOutcome) => (f.kind === 'worker-kill' ? Math.min(f.endedAt, f.startedAt + 3_000) : f.endedAt);
  const within = (t: number, f: FaultOutcome, [before, after]: [number, number]) => t >= f.startedAt - before && t <= end(f) + after;
  const natsOutages = input.faults.filter((f) => f.kind === 'nats-outage');
  // Only an isolated outage is compared: the others share their stretch with faults that hold mail up.
  const judged = natsOutages.filter((f) => f.isolated && f.evidence);
  const overlaps = (from: number, to: number, f: FaultOutcome, [before, after]: [number, number]) =>
    from <= end(f) + after && to >= f.startedAt - before;
  const holdsUp = (from: number, to: number) =>
    input.faults.some((f) => HOLDS_MAIL_UP[f.kind] !== undefined && overlaps(from, to, f, HOLDS_MAIL_UP[f.kind]!));
  let excluded = 0;
  const perOutage = judged.map((outage) => ({
    outage,
    samples: {
      bookings: { during: [], beside: [], slow: [] },
      cancellations: { during: [], beside: [], slow: [] },
    } as Record<Which, Sample>,
  }));
  const add = (which: Which, topic: BookingTopic, c: ClientRecord, at: number) => {
    for (const e of BOOKING_EMAILS[topic]) {
      const to = lc(e.to === 'guest' ? c.guestEmail : c.hostEmail);
      if (bounce.has(to)) continue;
      const delivered = firstAccepted.get(`${expectedMessageId(topic, c.id, e.handler, input.mailDomain)} ${to}`);
      if (delivered === undefined) continue; // lost mail is rules/mail.ts's business (nothingLost)
      if (holdsUp(at, delivered)) {
        excluded++;
        continue;
      }
      // A retried request can be answered after its booking's emails went out: no negative waits.
      const ms = Math.max(0, delivered - at);
      const during = perOutage.find((o) => within(at, o.outage, [0, 0]));
      if (during) {
        during.samples[which].during.push(ms);
        during.samples[which].slow.push([ms, `${topic} ${c.id} ${e.handler}`]);
      } else if (natsOutages.some((f) => within(at, f, NATS_OUTAGE_MARGIN))) excluded++;
      else for (const o of perOutage) if (within(at, o.outage, [PACE_BESIDE_MS, PACE_BESIDE_MS])) o.samples[which].beside.push(ms);
    }
  };
  for (const c of input.clientBookings) {
    if (c.answeredAt !== undefined) add('bookings', 'booking.created', c, c.answeredAt);
    if (c.status === 'cancelled' && !c.cancelUncertain && c.cancelledAt !== undefined)
      add('cancellations', 'booking.cancelled', c, c.cancelledAt);
  }
  return { perOutage, excluded };
}

/** A duration for the report: seconds to two places, 'n/a' when there is none. */
export const seconds = (ms: number | null) => (ms === null ? 'n/a' : `${(ms / 1000).toFixed(2)} s`);

/**
 * One kind's figures for the outage started `at`: emails (Message-ID, recipient) answered during it
 * and beside it (within PACE_BESIDE_MS, outside its margin) and delivered, each side's count and
 * 95th percentile (nearest rank) from the client's answer to the SMTP server's acceptance; and, when
 * both sides have enough to compare (PACE_MIN_DURING, PACE_MIN_BESIDE), the most p95 during may
 * be: max(2 × p95 beside, p95 beside + 2 s). A violation pushed when it is judged and too slow.
 */
function paceFigure(which: Which, at: string, s: Sample, violations: string[]) {
  const during = { n: s.during.length, p95Ms: p95(s.during) };
  const beside = { n: s.beside.length, p95Ms: p95(s.beside) };
  const judged = during.n >= PACE_MIN_DURING && beside.n >= PACE_MIN_BESIDE;
  const limitMs = judged ? Math.max(2 * beside.p95Ms!, beside.p95Ms! + 2_000) : null;
  if (judged && during.p95Ms! > limitMs!) {
    const slowest = s.slow
      .sort((a, b) => b[0] - a[0])
      .slice(0, 3)
      .map(([ms, what]) => `${what} ${seconds(ms)}`)
      .join('; ');
    violations.push(
      `${which}, the outage at ${at}: p95 ${seconds(during.p95Ms)} over ${during.n} emails answered during it, above ${seconds(limitMs)} ` +
        `(p95 ${seconds(beside.p95Ms)} over ${beside.n} emails answered beside it); slowest: ${slowest}`,
    );
  }
  return { during, beside, limitMs, judged };
}

export type PaceFigures = ReturnType<typeof paceFigure>;
