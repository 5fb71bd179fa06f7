import type { SinkRecord } from './smtp-sink.ts';

/*
 * The chaos run's judge: a pure function from what was gathered (gather.ts: the database, the
 * SMTP server's own record, the clients' notes, the fault log, the supervisor's exit log) to the
 * list of checks and the verdict. Nothing here talks to a process or a database, so every way the
 * run could be fooled can be fed to it in a unit test (test/unit/chaos-verdict.test.ts).
 *
 * Three sources, none of them the system's own account of itself:
 * - the database says which bookings exist, whose they are (guest and host addresses, joined
 *   from `users`, not read from the event payload) and what the outbox ended as;
 * - the clients say what they were told (every 201, every cancellation answered 200);
 * - the SMTP server says what it accepted, with the Message-ID it parsed and the envelope
 *   recipients (RCPT TO) it accepted it for.
 * When the events path runs, a fourth: the JetStream stream and the earnings ledger, read after
 * the drain by scripts/chaos/events.ts, whose checks join the list here (EVENT_CHECKS).
 * An expected email is a (Message-ID, recipient) pair; it counts as delivered only if the server
 * accepted that Message-ID for that recipient. Mail to anyone else is a violation.
 *
 * The verdict is `every check ok`, computed from the final list: there is no check that is
 * reported but not counted.
 */

export type FaultKind =
  | 'worker-kill'
  | 'api-kill'
  | 'smtp-outage'
  | 'pg-restart'
  | 'pg-terminate-workers'
  | 'consumer-kill'
  | 'nats-outage'
  | 'stream-delete'
  | 'forged-event'
  | 'nats-node-kill'
  | 'nats-node-wipe';
/** The faults of the events path (JetStream relay and earnings consumer): planned and required only when that part runs. */
export const EVENT_FAULT_KINDS: FaultKind[] = [
  'consumer-kill',
  'nats-outage',
  'stream-delete',
  'forged-event',
  'nats-node-kill',
  'nats-node-wipe',
];
export const FAULT_KINDS: FaultKind[] = [
  'worker-kill',
  'api-kill',
  'smtp-outage',
  'pg-restart',
  'pg-terminate-workers',
  ...EVENT_FAULT_KINDS,
];

/**
 * The events path's checks (scripts/chaos/events.ts makes them after the drain). When the events
 * part ran, every one of them must be in the final list: one that is missing is a broken check.
 */
export const EVENT_CHECKS = {
  caughtUp: 'events: the earnings consumer caught up with the stream after the run (consume:earnings --until-empty exit 0)',
  exactlyOnce:
    'events: every booking event of the outbox is in the JetStream stream exactly once (by Nats-Msg-Id; at most once if relayed before a stream deletion), and nothing else is but the forged events',
  ledger:
    'events: no money lost or invented: the earnings ledger per host and currency equals the bookings table (confirmed minus cancelled, in SQL)',
  deadLetters: 'events: no consumer dead letters but the forged events (every event the relay published is one the ledger can apply)',
  forgedRefused: 'events: forged events credited nothing (each one a consumer dead letter with its refusal, none in the inbox as applied)',
  emailPace:
    'events: emails kept their pace during NATS outages (p95 from the answer to the SMTP server ≤ max(2 × p95 of the emails answered in the 20 s beside them, that + 2 s), bookings and cancellations each)',
} as const;

/**
 * The webhooks' checks (scripts/chaos/webhooks.ts makes them after the drain). Always part of the
 * run: every one of them must be in the final list.
 */
export const WEBHOOK_CHECKS = {
  owed: 'webhooks: every booking event owed to every subscribed endpoint arrived at least once, with a valid signature',
  notOwed: 'webhooks: nothing arrived that was not owed, and every signature verified',
  settled: 'webhooks: no delivery left pending or failed',
} as const;

export interface CheckResult {
  name: string;
  ok: boolean;
  /** A few examples of what broke, for the report. */
  violations: string[];
  violationCount: number;
}

export interface BookingRow {
  publicId: string;
  status: 'confirmed' | 'cancelled';
  /** From `users` joined on the booking's guest and the property's host: not from any payload. */
  guestEmail: string;
  hostEmail: string;
}

export interface OutboxRow {
  publicId: string;
  topic: string;
  key: string | null;
  status: string;
  attempts: number;
  lastError: string | null;
  handlersDone: string[];
}

/** What one client was told about one booking (scripts/chaos/load.ts keeps these). */
export interface ClientRecord {
  id: string;
  guestEmail: string;
  hostEmail: string;
  checkIn: string;
  checkOut: string;
  /** 'confirmed' on the 201, 'cancelled' once a cancel answered 200. */
  status: 'confirmed' | 'cancelled';
  /** A cancel was sent and never answered: either status is possible. */
  cancelUncertain?: boolean;
  /** When the client got its 201 (ms epoch). */
  answeredAt?: number;
  /** When the client got the 200 of its cancel (ms epoch). */
  cancelledAt?: number;
}

/** GET /bookings/:id after the run, as the booking's guest. */
export interface Lookup {
  id: string;
  httpStatus: number | null;
  body?: { status?: string; checkIn?: string; checkOut?: string };
  error?: string;
}

/** A fault as the injector carried it out. Only one with `evidence` counts as injected. */
export interface FaultOutcome {
  kind: FaultKind;
  /** What it hit: 'worker-0', 'api', 'smtp', 'postgres'. No two faults on one target at once. */
  target: string;
  startedAt: number;
  endedAt: number;
  detail: string;
  /** The observed effect (the pid's exit, the backends that ended, the new postmaster start time); null: none seen. */
  evidence: string | null;
}

export interface UnplannedExit {
  process: string;
  /** When (ms epoch); needed to allow a consumer's refusal to start during a NATS outage. */
  at?: number;
  code: number | null;
  signal: string | null;
  lastLines: string[];
}

export interface JudgeInput {
  durationSeconds: number;
  /** The domain of MAIL_FROM: the right-hand side of every Message-ID. */
  mailDomain: string;
  bounceEmails: string[];
  handledTopics: string[];
  bookings: BookingRow[];
  outbox: OutboxRow[];
  /** Pairs of confirmed bookings of one property whose dates overlap (a SQL self-join). */
  overlaps: { a: string; b: string; propertyId: string }[];
  records: SinkRecord[];
  clientBookings: ClientRecord[];
  lookups: Lookup[];
  serverErrors: { at: number; route: string; status: number; body: string }[];
  /** Requests the load's clients abandoned after their deadline (any route). */
  clientsGaveUp: number;
  idempotencyMismatches: string[];
  faultsPlanned: Record<FaultKind, number>;
  faults: FaultOutcome[];
  unplannedExits: UnplannedExit[];
  drained: boolean;
  /**
   * The events path (scripts/chaos/events.ts): its checks, made after the drain. Null: that part
   * did not run (nats-server missing outside CI), so neither its checks nor its faults are required.
   */
  events: { checks: CheckResult[] } | null;
  /** The webhooks' checks (scripts/chaos/webhooks.ts), made after the drain. */
  webhooks: { checks: CheckResult[] };
}

export interface MailFigures {
  /** (Message-ID, recipient) pairs expected, 550 recipients excluded. */
  expected: number;
  delivered: number;
  /** Accepted (message, recipient) pairs, copies included. */
  deliveries: number;
  duplicates: number;
  duplicatedMessages: number;
  lost: number;
  unexpected: number;
  wrongRecipient: number;
  refusedPermanently: number;
  refused451: number;
  refused550: number;
}

/** What a run must contain before its checks mean anything, scaled to the load's duration. */
export interface Minimums {
  bookings: number;
  cancellations: number;
  emailsExpected: number;
  /** Per fault kind, faults with evidence (0 for the events kinds when the events part did not run). */
  faults: Record<FaultKind, number>;
}

export interface Verdict {
  ok: boolean;
  checks: CheckResult[];
  minimums: Minimums;
  mail: MailFigures;
  outbox: { byTopicStatus: Record<string, number>; dead: number; pendingHandled: number; pendingUnhandled: number };
  bookings: { total: number; confirmed: number; cancelled: number };
  faults: { planned: Record<FaultKind, number>; withEvidence: Record<FaultKind, number>; withoutEffect: number };
  /** The emails' pace during NATS outages against beside them (null: the events part did not run). */
  emailPace: EmailPaceFigures | null;
}

/** The emails each booking event must produce: handler name and which party gets it. */
const BOOKING_EMAILS = {
  'booking.created': [
    { handler: 'email.guest-confirmation', to: 'guest' },
    { handler: 'email.host-new-booking', to: 'host' },
  ],
  'booking.cancelled': [
    { handler: 'email.guest-cancellation', to: 'guest' },
    { handler: 'email.host-cancellation', to: 'host' },
  ],
} as const;

/**
 * The Message-ID the mail contract promises (docs/chaos.md, src/mail/mailer.ts): `<` + the
 * event's idempotency key (`booking-created:<booking id>`) and the handler name, every character
 * outside [A-Za-z0-9._-] turned into '.', `@` the sender's domain `>`. Written out here from the
 * contract rather than by calling the system's helper, so a change of the system's ids shows up
 * as lost mail instead of being followed silently (a unit test pins the two together).
 */
export function expectedMessageId(
  topic: 'booking.created' | 'booking.cancelled',
  bookingId: string,
  handler: string,
  domain: string,
): string {
  const key = `${topic === 'booking.created' ? 'booking-created' : 'booking-cancelled'}:${bookingId}`;
  return `<${`${key}.${handler}`.replace(/[^A-Za-z0-9._-]+/g, '.')}@${domain}>`;
}

/**
 * A run on a quiet 2-core machine makes ~25 bookings a second (16,600 in the committed 10-minute
 * run); the floor is one every two seconds (at least 10), so a machine loaded many times over
 * still passes and an empty or stalled run does not. Faults: every kind at least once, and three quarters of each kind's
 * planned count, with evidence; the events kinds only when the events part ran.
 */
export function minimums(durationSeconds: number, planned: Partial<Record<FaultKind, number>>, eventsRan: boolean): Minimums {
  const bookings = Math.max(10, Math.ceil(durationSeconds / 2));
  return {
    bookings,
    cancellations: Math.max(1, Math.ceil(durationSeconds / 15)),
    // Two emails a booking, less those to the two 550 guests (2 of 16): 1.5 a booking is a safe floor.
    emailsExpected: Math.ceil(bookings * 1.5),
    faults: Object.fromEntries(
      FAULT_KINDS.map((k) => [k, !eventsRan && EVENT_FAULT_KINDS.includes(k) ? 0 : Math.max(1, Math.ceil((planned[k] ?? 0) * 0.75))]),
    ) as Record<FaultKind, number>,
  };
}

function result(name: string, violations: string[]): CheckResult {
  return { name, ok: violations.length === 0, violations: violations.slice(0, 10), violationCount: violations.length };
}

/** A check from its violations (for checks made outside the judge, as run.ts's events ones). */
export const checkResult = result;

const lc = (s: string) => s.toLowerCase();

/**
 * How long after a NATS outage's end a consumer's "cannot reach NATS" exit is still put down to it:
 * a start that began while the server was down connects (3 s timeout) after it came back.
 */
const NATS_REFUSAL_SLACK_MS = 5_000;

interface ExpectedEmail {
  messageId: string;
  recipient: string;
  what: string;
  bounces: boolean;
}

/** How many emails of a kind must have been answered during NATS outages (and beside them) for the pace to be judged. */
export const PACE_MIN_DURING = 5;
export const PACE_MIN_BESIDE = 20;

/**
 * Faults that hold emails up by themselves, and the span around each (ms before its start, after
 * its end; a worker kill's end is the kill, within 3 s of its start) whose answers they can delay:
 * a killed worker's or a severed connection's batch waits for its lease (5 s from the claim, made
 * within ~3 s before the kill); a restarted PostgreSQL
 * stops every worker; an SMTP outage is the emails' own downstream; a deleted stream holds the
 * relay's slots for the 2 s it waits before recreating the stream. An email answered within one
 * of these is in neither sample, so the comparison measures the NATS outage alone.
 */
const HOLDS_MAIL_UP: Partial<Record<FaultKind, [before: number, after: number]>> = {
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

export interface PaceSample {
  /** Emails (Message-ID, recipient) answered in the sample and delivered. */
  n: number;
  /** 95th percentile (nearest rank) of the time from the client's answer to the SMTP server's acceptance, ms. */
  p95Ms: number | null;
}

export interface PaceFigures {
  during: PaceSample;
  /** Emails answered beside the outages: within PACE_BESIDE_MS before or after one, outside its margin. */
  beside: PaceSample;
  /** The most p95 during outages may be: max(2 × p95 beside, p95 beside + 2 s); null when not judged. */
  limitMs: number | null;
  /** Enough emails on both sides (PACE_MIN_DURING, PACE_MIN_BESIDE) to compare. */
  judged: boolean;
}

export interface EmailPaceFigures {
  bookings: PaceFigures;
  cancellations: PaceFigures;
  /** Emails in neither sample: answered around a fault that holds mail up by itself (HOLDS_MAIL_UP). */
  excluded: number;
}

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
export function emailPace(input: Pick<JudgeInput, 'clientBookings' | 'records' | 'faults' | 'bounceEmails' | 'mailDomain'>): {
  check: CheckResult;
  figures: EmailPaceFigures;
} {
  const firstAccepted = new Map<string, number>();
  for (const r of input.records) {
    if (r.kind !== 'accepted') continue;
    for (const to of r.to) {
      const k = `${r.messageId ?? ''} ${lc(to)}`;
      firstAccepted.set(k, Math.min(firstAccepted.get(k) ?? Infinity, r.at));
    }
  }
  const bounce = new Set(input.bounceEmails.map(lc));
  // A worker kill lands within 3 s of its start (the wait for a busy worker); while the worker is
  // down the other one carries the load, so only mail claimed before the kill waits for a lease.
  const end = (f: FaultOutcome) => (f.kind === 'worker-kill' ? Math.min(f.endedAt, f.startedAt + 3_000) : f.endedAt);
  const within = (t: number, f: FaultOutcome, [before, after]: [number, number]) => t >= f.startedAt - before && t <= end(f) + after;
  const natsOutages = input.faults.filter((f) => f.kind === 'nats-outage');
  const holdsUp = (t: number) => input.faults.some((f) => HOLDS_MAIL_UP[f.kind] !== undefined && within(t, f, HOLDS_MAIL_UP[f.kind]!));
  let excluded = 0;
  const samples = {
    bookings: { during: [] as number[], beside: [] as number[], slow: [] as [number, string][] },
    cancellations: { during: [] as number[], beside: [] as number[], slow: [] as [number, string][] },
  };
  const add = (which: keyof typeof samples, topic: 'booking.created' | 'booking.cancelled', c: ClientRecord, at: number) => {
    const emails = BOOKING_EMAILS[topic];
    for (const e of emails) {
      const to = lc(e.to === 'guest' ? c.guestEmail : c.hostEmail);
      if (bounce.has(to)) continue;
      const delivered = firstAccepted.get(`${expectedMessageId(topic, c.id, e.handler, input.mailDomain)} ${to}`);
      if (delivered === undefined) continue; // lost mail is check 2's business
      if (holdsUp(at)) {
        excluded++;
        continue;
      }
      // A retried request can be answered after its booking's emails went out: no negative waits.
      const ms = Math.max(0, delivered - at);
      if (natsOutages.some((f) => f.evidence && within(at, f, [0, 0]))) {
        samples[which].during.push(ms);
        samples[which].slow.push([ms, `${topic} ${c.id} ${e.handler}`]);
      } else if (natsOutages.some((f) => within(at, f, NATS_OUTAGE_MARGIN))) excluded++;
      else if (natsOutages.some((f) => f.evidence && within(at, f, [PACE_BESIDE_MS, PACE_BESIDE_MS]))) samples[which].beside.push(ms);
    }
  };
  for (const c of input.clientBookings) {
    if (c.answeredAt !== undefined) add('bookings', 'booking.created', c, c.answeredAt);
    if (c.status === 'cancelled' && !c.cancelUncertain && c.cancelledAt !== undefined)
      add('cancellations', 'booking.cancelled', c, c.cancelledAt);
  }
  const violations: string[] = [];
  const seconds = (ms: number | null) => (ms === null ? 'n/a' : `${(ms / 1000).toFixed(2)} s`);
  const figure = (which: keyof typeof samples): PaceFigures => {
    const s = samples[which];
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
        `${which}: p95 ${seconds(during.p95Ms)} over ${during.n} emails answered during NATS outages, above ${seconds(limitMs)} ` +
          `(p95 ${seconds(beside.p95Ms)} over ${beside.n} emails answered beside them); slowest: ${slowest}`,
      );
    }
    return { during, beside, limitMs, judged };
  };
  const figures = { bookings: figure('bookings'), cancellations: figure('cancellations'), excluded };
  return { check: result(EVENT_CHECKS.emailPace, violations), figures };
}

export function judge(input: JudgeInput): Verdict {
  const checks: CheckResult[] = [];
  const bounce = new Set(input.bounceEmails.map(lc));
  const bookingById = new Map(input.bookings.map((b) => [b.publicId, b]));
  const outbox = input.outbox;

  // --- 0. Something to judge: an empty or stalled run proves nothing and must not pass.
  const withEvidence = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  for (const f of input.faults) if (f.evidence) withEvidence[f.kind]++;
  const min = minimums(input.durationSeconds, input.faultsPlanned, input.events !== null);

  // --- expected mail: from the database's bookings and from the clients' 201s, each with the
  // recipient the database (or the client) knows, never the one the event payload carries.
  const expected = new Map<string, ExpectedEmail>(); // `${messageId} ${recipient}` → email
  const expectedByMessageId = new Map<string, ExpectedEmail[]>();
  const expect_ = (topic: 'booking.created' | 'booking.cancelled', bookingId: string, guest: string, host: string) => {
    for (const e of BOOKING_EMAILS[topic]) {
      const messageId = expectedMessageId(topic, bookingId, e.handler, input.mailDomain);
      const recipient = lc(e.to === 'guest' ? guest : host);
      const k = `${messageId} ${recipient}`;
      if (expected.has(k)) continue;
      const email = { messageId, recipient, what: `${topic} ${bookingId}: ${e.handler} to ${recipient}`, bounces: bounce.has(recipient) };
      expected.set(k, email);
      expectedByMessageId.set(messageId, [...(expectedByMessageId.get(messageId) ?? []), email]);
    }
  };
  for (const b of input.bookings) {
    expect_('booking.created', b.publicId, b.guestEmail, b.hostEmail);
    if (b.status === 'cancelled') expect_('booking.cancelled', b.publicId, b.guestEmail, b.hostEmail);
  }
  const clientDisagrees: string[] = [];
  for (const c of input.clientBookings) {
    const b = bookingById.get(c.id);
    if (b && (lc(b.guestEmail) !== lc(c.guestEmail) || lc(b.hostEmail) !== lc(c.hostEmail))) {
      clientDisagrees.push(
        `booking ${c.id}: the client booked as ${c.guestEmail} with host ${c.hostEmail}, the database says ${b.guestEmail} / ${b.hostEmail}`,
      );
    }
    expect_('booking.created', c.id, c.guestEmail, c.hostEmail);
    if (c.status === 'cancelled' && !c.cancelUncertain) expect_('booking.cancelled', c.id, c.guestEmail, c.hostEmail);
  }
  const expectedCount = [...expected.values()].filter((e) => !e.bounces).length;

  const cancellations = input.bookings.filter((b) => b.status === 'cancelled').length;
  {
    const v: string[] = [];
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
    checks.push(
      result(
        'the run had something to judge: bookings, cancellations, emails and every kind of fault (with evidence) at the minimum for its duration; no client gave up',
        v,
      ),
    );
  }

  // --- 1. Every booking has exactly one booking.created event; every cancelled one exactly one
  // booking.cancelled; no event without its booking (the outbox row and the booking are one commit).
  const events = new Map<string, OutboxRow[]>();
  for (const m of outbox) {
    if (m.topic !== 'booking.created' && m.topic !== 'booking.cancelled') continue;
    const k = `${m.topic}:${m.key}`;
    events.set(k, [...(events.get(k) ?? []), m]);
  }
  {
    const v: string[] = [];
    for (const b of input.bookings) {
      const created = events.get(`booking.created:${b.publicId}`) ?? [];
      const cancelled = events.get(`booking.cancelled:${b.publicId}`) ?? [];
      if (created.length !== 1) v.push(`booking ${b.publicId} has ${created.length} booking.created events`);
      if (b.status === 'cancelled' && cancelled.length !== 1)
        v.push(`cancelled booking ${b.publicId} has ${cancelled.length} booking.cancelled events`);
      if (b.status === 'confirmed' && cancelled.length !== 0) v.push(`confirmed booking ${b.publicId} has a booking.cancelled event`);
    }
    for (const m of outbox) {
      if ((m.topic === 'booking.created' || m.topic === 'booking.cancelled') && !bookingById.has(m.key ?? '')) {
        v.push(`${m.topic} ${m.publicId} for a booking that does not exist (${m.key})`);
      }
    }
    checks.push(result('every booking has exactly its events in the outbox (same transaction)', v));
  }

  // --- 2. Mail, from the SMTP server's record: accepted (Message-ID, envelope recipient) pairs.
  const accepted = new Map<string, number>(); // `${messageId} ${recipient}` → copies
  let deliveries = 0;
  let refused451 = 0;
  let refused550 = 0;
  for (const r of input.records) {
    if (r.kind === 'accepted') {
      for (const to of r.to) {
        deliveries++;
        const k = `${r.messageId ?? '(no Message-ID)'} ${lc(to)}`;
        accepted.set(k, (accepted.get(k) ?? 0) + 1);
      }
    } else if (r.code === 451) refused451++;
    else refused550++;
  }
  const lost: string[] = [];
  let refusedPermanently = 0;
  const bounceDelivered: string[] = [];
  for (const [k, e] of expected) {
    if (e.bounces) {
      refusedPermanently++;
      if (accepted.has(k)) bounceDelivered.push(`${e.what} was accepted although the address answers 550`);
    } else if (!accepted.has(k)) lost.push(`${e.what} never delivered`);
  }
  checks.push(
    result(
      'every booking and every cancellation: guest and host emails delivered to the right address (zero lost; matched on Message-ID and recipient)',
      [...lost, ...clientDisagrees],
    ),
  );

  const unexpected: string[] = [];
  const wrongRecipient: string[] = [];
  for (const k of accepted.keys()) {
    if (expected.has(k)) continue;
    const [messageId, recipient] = [k.slice(0, k.lastIndexOf(' ')), k.slice(k.lastIndexOf(' ') + 1)];
    const meant = expectedByMessageId.get(messageId);
    if (meant) wrongRecipient.push(`${messageId} delivered to ${recipient}; it was meant for ${meant.map((e) => e.recipient).join(', ')}`);
    else unexpected.push(`unexpected Message-ID ${messageId} (to ${recipient})`);
  }
  checks.push(
    result(
      'no email to anyone else, and none about anything that did not happen (every accepted Message-ID and recipient match a booking)',
      [...wrongRecipient, ...unexpected, ...bounceDelivered],
    ),
  );

  // --- 3. DEAD: exactly the events of the 550 recipients, each with last_error; nothing else.
  {
    const v: string[] = [];
    for (const m of outbox) {
      const b = m.key ? bookingById.get(m.key) : undefined;
      const involvesBounce = !!b && (m.topic === 'booking.created' || m.topic === 'booking.cancelled') && bounce.has(lc(b.guestEmail));
      if (involvesBounce) {
        if (m.status !== 'DEAD') v.push(`${m.topic} ${m.publicId} to a 550 recipient is ${m.status}, not DEAD`);
        else if (!m.lastError || !/550/.test(m.lastError))
          v.push(`${m.topic} ${m.publicId} DEAD without a 550 in last_error: ${m.lastError}`);
        else if (/\S+@\S+\.\w+/.test(m.lastError)) v.push(`${m.topic} ${m.publicId} last_error shows an email address`);
        // The host's email of the same event must still have gone out (handlers are tracked apart).
        const hostHandler = m.topic === 'booking.created' ? 'email.host-new-booking' : 'email.host-cancellation';
        if (!m.handlersDone.includes(hostHandler))
          v.push(`${m.topic} ${m.publicId}: ${hostHandler} not recorded done (last_error: ${m.lastError})`);
      } else if (m.status === 'DEAD') {
        v.push(`${m.topic} ${m.publicId} is DEAD after ${m.attempts} attempts: ${m.lastError}`);
      }
    }
    checks.push(result("the 550 recipients' messages are DEAD with last_error, and nothing else is DEAD", v));
  }

  // --- 4. Nothing PENDING at the end (for topics the worker handles), and the drain finished.
  const handled = new Set(input.handledTopics);
  const pendingHandled = outbox.filter((m) => m.status === 'PENDING' && handled.has(m.topic));
  const pendingUnhandled = outbox.filter((m) => m.status === 'PENDING' && !handled.has(m.topic));
  checks.push(
    result(
      'the outbox ends with nothing PENDING',
      pendingHandled.map((m) => `${m.topic} ${m.publicId} still PENDING after ${m.attempts} attempts: ${m.lastError ?? ''}`),
    ),
  );
  checks.push(result('the workers drain within the bound', input.drained ? [] : ['not drained']));

  // --- 5. No two confirmed bookings of a property overlap (the SQL self-join's rows).
  checks.push(
    result(
      'no two confirmed bookings overlap (SQL self-join)',
      input.overlaps.map((r) => `${r.a} overlaps ${r.b} (property ${r.propertyId})`),
    ),
  );

  // --- 6. Every client that got a 201 finds its booking, in the state it was told.
  {
    const v: string[] = [];
    const lookups = new Map(input.lookups.map((l) => [l.id, l]));
    for (const cb of input.clientBookings) {
      const l = lookups.get(cb.id);
      if (!bookingById.has(cb.id)) v.push(`booking ${cb.id}: answered 201 but not in the database`);
      if (!l) v.push(`booking ${cb.id}: never looked up`);
      else if (l.httpStatus !== 200) v.push(`booking ${cb.id}: GET answered ${l.httpStatus ?? l.error}`);
      else if (!cb.cancelUncertain && l.body?.status !== cb.status)
        v.push(`booking ${cb.id}: client was told ${cb.status}, API says ${l.body?.status}`);
      else if (l.body?.checkIn !== cb.checkIn || l.body?.checkOut !== cb.checkOut) v.push(`booking ${cb.id}: dates differ`);
      const b = bookingById.get(cb.id);
      if (b && !cb.cancelUncertain && b.status !== cb.status)
        v.push(`booking ${cb.id}: client was told ${cb.status}, the database says ${b.status}`);
    }
    checks.push(result('every client that got a 201 finds its booking (GET /bookings/:id and the database), as it was told', v));
  }

  // --- 7. No request answered 500.
  checks.push(
    result(
      'no request got a 500',
      input.serverErrors.map((e) => `${new Date(e.at).toISOString()} ${e.route} ${e.status} ${e.body.slice(0, 200)}`),
    ),
  );

  // --- 8. No process crashed on its own. The allowed exits: a worker restarted while Postgres is
  // down refuses to start (exit 1, "cannot reach the database"); the earnings consumer started
  // while nats-server is down (a NATS outage with evidence, or just after one) refuses to start
  // (exit 1, "cannot reach NATS"). Their manager starts them again.
  {
    const v: string[] = [];
    const natsDown = input.faults.filter((f) => f.kind === 'nats-outage' && f.evidence);
    for (const e of input.unplannedExits) {
      const refusedToStart = e.code === 1 && e.lastLines.some((l) => l.includes('cannot reach the database'));
      const refusedWhileNatsDown =
        e.code === 1 &&
        e.lastLines.some((l) => l.includes('cannot reach NATS')) &&
        e.at !== undefined &&
        natsDown.some((f) => e.at! >= f.startedAt && e.at! <= f.endedAt + NATS_REFUSAL_SLACK_MS);
      if (!refusedToStart && !refusedWhileNatsDown)
        v.push(`${e.process} exited on its own (code ${e.code ?? e.signal}): ${e.lastLines.join(' / ').slice(0, 600)}`);
    }
    checks.push(
      result('no process crashed (a worker refusing to start while Postgres is down, or the consumer while NATS is, is allowed)', v),
    );
  }

  // --- 9. The same Idempotency-Key sent twice at once gets the same answer.
  checks.push(
    result('the same Idempotency-Key sent twice at once gets the same answer (one booking, replayed)', input.idempotencyMismatches),
  );

  // --- 10. The faults were what the run says: never two on one target at once.
  {
    const v: string[] = [];
    const byTarget = new Map<string, FaultOutcome[]>();
    for (const f of input.faults) byTarget.set(f.target, [...(byTarget.get(f.target) ?? []), f]);
    for (const [target, list] of byTarget) {
      const s = [...list].sort((a, b) => a.startedAt - b.startedAt);
      for (let i = 1; i < s.length; i++) {
        if (s[i]!.startedAt < s[i - 1]!.endedAt)
          v.push(`${s[i]!.kind} on ${target} started while ${s[i - 1]!.kind} on it was still in progress`);
      }
    }
    checks.push(result('never two faults on one target at once', v));
  }

  // --- 11. The events path, when it ran: each of its checks (EVENT_CHECKS) is in the final list;
  // one that was not made is broken, not skipped.
  // The email pace is judged here, from the clients' and the SMTP server's records.
  const pace = input.events ? emailPace(input) : null;
  if (input.events && pace) {
    const made = [...input.events.checks, pace.check];
    const names = new Set(made.map((c) => c.name));
    for (const name of Object.values(EVENT_CHECKS)) if (!names.has(name)) checks.push(result(name, ['this check was not made']));
    checks.push(...made);
  }

  // --- 12. Webhooks: each of their checks (WEBHOOK_CHECKS) is in the final list.
  {
    const made = new Set(input.webhooks.checks.map((c) => c.name));
    for (const name of Object.values(WEBHOOK_CHECKS)) if (!made.has(name)) checks.push(result(name, ['this check was not made']));
    checks.push(...input.webhooks.checks);
  }

  const byTopicStatus: Record<string, number> = {};
  for (const m of outbox) byTopicStatus[`${m.topic} ${m.status}`] = (byTopicStatus[`${m.topic} ${m.status}`] ?? 0) + 1;
  const dupCounts = [...accepted.entries()]
    .filter(([k]) => expected.has(k))
    .map(([, n]) => n)
    .filter((n) => n > 1);
  return {
    ok: checks.every((c) => c.ok),
    checks,
    minimums: min,
    mail: {
      expected: expectedCount,
      delivered: [...expected.entries()].filter(([k, e]) => !e.bounces && accepted.has(k)).length,
      deliveries,
      duplicates: dupCounts.reduce((s, n) => s + n - 1, 0),
      duplicatedMessages: dupCounts.length,
      lost: lost.length,
      unexpected: unexpected.length,
      wrongRecipient: wrongRecipient.length,
      refusedPermanently,
      refused451,
      refused550,
    },
    outbox: {
      byTopicStatus,
      dead: outbox.filter((m) => m.status === 'DEAD').length,
      pendingHandled: pendingHandled.length,
      pendingUnhandled: pendingUnhandled.length,
    },
    bookings: {
      total: input.bookings.length,
      confirmed: input.bookings.filter((b) => b.status === 'confirmed').length,
      cancelled: cancellations,
    },
    faults: { planned: input.faultsPlanned, withEvidence, withoutEffect: input.faults.filter((f) => !f.evidence).length },
    emailPace: pace?.figures ?? null,
  };
}
