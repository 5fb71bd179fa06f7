import { Rng } from '../../scripts/chaos/rng.ts';
import type { SinkRecord } from '../../scripts/chaos/smtp-sink.ts';
import { EVENT_CHECKS, WEBHOOK_CHECKS, type CheckResult } from '../../scripts/chaos/checks.ts';
import type { BookingRow, ClientRecord, JudgeInput, Lookup, OutboxRow, UnplannedExit } from '../../scripts/chaos/evidence.ts';
import { FAULT_KINDS, type FaultKind, type FaultOutcome } from '../../scripts/chaos/fault-kinds.ts';
import { BOOKING_EMAILS, expectedMessageId } from '../../scripts/chaos/mail.ts';

/*
 * Untidy evidence for the chaos judge, drawn from a seed: a run in which anything the judge looks
 * at may have gone wrong, a little, at random (mail lost, duplicated or sent to the wrong person,
 * events missing or doubled, messages DEAD for no reason, 500s, crashes, faults without effect or
 * on one target at once, NATS outages that slow the mail down, checks of the events path or of
 * the webhooks not made). Every seed is a different mix, so a handful of seeds reach every branch
 * of every rule. test/unit/harness/chaos-judge-golden.test.ts feeds these to the judge.
 */

const DOMAIN = 'stayhub.test';
const uuid = (prefix: number, i: number) => `00000000-0000-4000-${String(prefix).padStart(4, '0')}-${String(i).padStart(12, '0')}`;
type Topic = 'booking.created' | 'booking.cancelled';
const EMAILS: Record<Topic, readonly { handler: string; to: 'guest' | 'host' }[]> = BOOKING_EMAILS;
const TARGETS: Record<FaultKind, string> = {
  'worker-kill': 'worker-0',
  'api-kill': 'api',
  'smtp-outage': 'smtp',
  'pg-restart': 'postgres',
  'pg-terminate-workers': 'postgres',
  'consumer-kill': 'earnings-consumer',
  'nats-outage': 'nats',
  'stream-delete': 'events stream',
  'forged-event': 'events stream',
  'nats-node-kill': 'nats',
  'nats-node-wipe': 'nats',
};

interface Run {
  rng: Rng;
  /** Whether something that should not happen happens this time: `p` scaled by the run's mess (0: a tidy run). */
  bad(p: number): boolean;
  start: number;
  spanMs: number;
  bounce: string[];
  faults: FaultOutcome[];
}

function drawFaults(r: Run): { planned: Record<FaultKind, number>; faults: FaultOutcome[] } {
  const planned = Object.fromEntries(FAULT_KINDS.map((k) => [k, r.rng.int(0, 3)])) as Record<FaultKind, number>;
  const faults: FaultOutcome[] = [];
  for (const kind of FAULT_KINDS) {
    for (let i = 0; i < planned[kind]; i++) {
      // Tidy: one after another, a second apart; untidy: anywhere, so two may hit one target at once.
      const startedAt = r.bad(1) ? r.start + Math.round(r.rng.between(0, r.spanMs)) : r.start + 10_000 * faults.length;
      const long = kind === 'nats-outage' ? r.rng.int(3_000, 15_000) : r.rng.int(0, 4_000);
      faults.push({
        kind,
        target: kind === 'worker-kill' ? `worker-${r.rng.int(0, 1)}` : TARGETS[kind],
        startedAt,
        endedAt: startedAt + long,
        detail: `${kind} #${i}`,
        evidence: r.bad(0.15) ? null : `${kind} #${i} seen`,
        // The first outage is an isolated one, as the plan's first is: the email pace is judged on it.
        ...(kind === 'nats-outage' && i === 0 ? { isolated: true } : {}),
      });
    }
  }
  return { planned, faults };
}

interface Booking {
  /** Null: a booking the clients were told of that the database does not have. */
  row: BookingRow | null;
  client: ClientRecord | null;
}

function drawBookings(r: Run, n: number): Booking[] {
  const guests = ['guest-a@chaos.test', 'Guest-B@chaos.test', 'guest-c@chaos.test', ...r.bounce];
  const hosts = ['host-a@chaos.test', 'host-b@chaos.test', 'HOST-C@chaos.test'];
  const out: Booking[] = [];
  for (let i = 0; i < n; i++) {
    const id = uuid(1, i);
    const guestEmail = r.rng.pick(guests);
    const hostEmail = r.rng.pick(hosts);
    const status = r.rng.chance(0.3) ? 'cancelled' : 'confirmed';
    const answeredAt = r.start + Math.round(r.rng.between(0, r.spanMs));
    const row: BookingRow = { publicId: id, status, guestEmail, hostEmail };
    if (r.bad(0.07)) {
      out.push({ row, client: null });
      continue;
    }
    const client: ClientRecord = {
      id,
      guestEmail: r.bad(0.02) ? 'someone-else@chaos.test' : guestEmail.toUpperCase(),
      hostEmail,
      checkIn: '2027-01-01',
      checkOut: '2027-01-03',
      status: r.bad(0.03) ? (status === 'cancelled' ? 'confirmed' : 'cancelled') : status,
      cancelUncertain: r.bad(0.05) ? true : undefined,
      answeredAt: r.rng.chance(0.97) ? answeredAt : undefined,
      cancelledAt: status === 'cancelled' ? answeredAt + r.rng.int(100, 5_000) : undefined,
    };
    out.push({ row, client });
  }
  // A client told 201 for a booking the database does not have.
  if (r.bad(0.3)) {
    const at = r.start + Math.round(r.rng.between(0, r.spanMs));
    const client: ClientRecord = {
      id: uuid(2, 0),
      guestEmail: guests[0]!,
      hostEmail: hosts[0]!,
      checkIn: '2027-02-01',
      checkOut: '2027-02-02',
      status: 'confirmed',
      answeredAt: at,
    };
    out.push({ row: null, client });
  }
  return out;
}

function drawOutbox(r: Run, bookings: Booking[]): OutboxRow[] {
  const outbox: OutboxRow[] = [];
  let n = 0;
  const push = (topic: string, key: string | null, bounces: boolean) => {
    const status = bounces ? (r.bad(0.1) ? 'DONE' : 'DEAD') : r.bad(0.03) ? 'PENDING' : r.bad(0.02) ? 'DEAD' : 'DONE';
    const errors = [
      'email.guest-confirmation: Error(EENVELOPE): 550 5.1.1 Mailbox does not exist (chaos)',
      'email.guest-confirmation: 550 refused for bounce-1@chaos.test',
      'events.relay: timeout',
      null,
    ];
    const handlers = EMAILS[topic as Topic]?.map((e) => e.handler) ?? [];
    outbox.push({
      publicId: uuid(3, n++),
      topic,
      key,
      status,
      attempts: r.rng.int(1, 12),
      lastError: status === 'DONE' ? null : bounces && !r.bad(0.3) ? errors[0]! : r.rng.pick(errors),
      handlersDone: handlers.filter((h) => !(bounces && h.includes('guest')) && !r.bad(0.03)),
    });
  };
  for (const b of bookings) {
    if (!b.row) continue;
    const bounces = r.bounce.includes(b.row.guestEmail.toLowerCase());
    for (let k = r.bad(0.03) ? 0 : r.bad(0.03) ? 2 : 1; k > 0; k--) push('booking.created', b.row.publicId, bounces);
    if (b.row.status === 'cancelled' ? r.bad(0.03) === false : r.bad(0.02)) push('booking.cancelled', b.row.publicId, bounces);
  }
  if (r.bad(0.3)) push('booking.created', uuid(4, 0), false);
  for (let k = r.rng.int(0, 3); k > 0; k--) push('property.changed', null, false);
  return outbox;
}

function drawMail(r: Run, bookings: Booking[]): SinkRecord[] {
  const records: SinkRecord[] = [];
  const outages = r.faults.filter((f) => f.kind === 'nats-outage');
  const slowDuringOutages = r.rng.chance(0.5);
  const send = (topic: Topic, row: BookingRow, at: number) => {
    for (const e of EMAILS[topic]) {
      const to = (e.to === 'guest' ? row.guestEmail : row.hostEmail).toLowerCase();
      const messageId = expectedMessageId(topic, row.publicId, e.handler, DOMAIN);
      const during = outages.some((f) => at >= f.startedAt && at <= f.endedAt);
      const delay = r.rng.int(50, 1_500) * (during && slowDuringOutages ? r.rng.int(2, 8) : 1);
      if (r.bounce.includes(to)) {
        records.push({ kind: 'rejected', at: at + delay, code: 550, messageId, to: [to] });
        if (r.bad(0.05)) records.push({ kind: 'accepted', at: at + delay, messageId, idempotencyKey: null, to: [to] });
        continue;
      }
      if (r.rng.chance(0.08)) records.push({ kind: 'rejected', at: at + delay - 10, code: 451, messageId, to: [to] });
      if (r.bad(0.03)) continue; // lost
      const recipient = r.bad(0.02) ? 'stranger@chaos.test' : to;
      for (let copies = r.bad(0.05) ? 2 : 1; copies > 0; copies--)
        records.push({ kind: 'accepted', at: at + delay + copies, messageId, idempotencyKey: null, to: [recipient] });
    }
  };
  for (const b of bookings) {
    if (!b.row) continue;
    const at = b.client?.answeredAt ?? r.start;
    send('booking.created', b.row, at);
    if (b.row.status === 'cancelled') send('booking.cancelled', b.row, b.client?.cancelledAt ?? at + 1_000);
  }
  if (r.bad(0.3))
    records.push({ kind: 'accepted', at: r.start, messageId: `<made-up@${DOMAIN}>`, idempotencyKey: null, to: ['guest-a@chaos.test'] });
  if (r.bad(0.2)) records.push({ kind: 'accepted', at: r.start, messageId: null, idempotencyKey: null, to: ['guest-a@chaos.test'] });
  return records;
}

function drawLookups(r: Run, clients: ClientRecord[]): Lookup[] {
  const lookups: Lookup[] = [];
  for (const c of clients) {
    const roll = r.bad(0.1) ? r.rng.between(0, 0.08) : r.bad(0.02) ? 0.99 : 0.5;
    if (roll < 0.02) continue;
    if (roll < 0.04) lookups.push({ id: c.id, httpStatus: 404 });
    else if (roll < 0.05) lookups.push({ id: c.id, httpStatus: null, error: 'Error: socket hang up' });
    else {
      const status = roll < 0.07 ? (c.status === 'cancelled' ? 'confirmed' : 'cancelled') : c.status;
      const checkOut = roll > 0.98 ? '2027-01-04' : c.checkOut;
      lookups.push({ id: c.id, httpStatus: 200, body: { status, checkIn: c.checkIn, checkOut } });
    }
  }
  return lookups;
}

function drawExits(r: Run): UnplannedExit[] {
  const exits: UnplannedExit[] = [];
  const outage = r.faults.find((f) => f.kind === 'nats-outage');
  const kinds = [
    { process: 'worker-0', code: 1, lastLines: ['{"msg":"cannot reach the database"}'] },
    { process: 'earnings-consumer', code: 1, lastLines: ['{"msg":"cannot reach NATS"}'], at: outage ? outage.endedAt + 2_000 : r.start },
    { process: 'earnings-consumer', code: 1, lastLines: ['{"msg":"cannot reach NATS"}'], at: r.start - 60_000 },
    { process: 'api', code: null, signal: 'SIGSEGV', lastLines: ['boom'] },
    { process: 'nats-server', code: 2, lastLines: ['n1:', 'fatal'] },
  ];
  for (let k = r.bad(0.8) ? r.rng.int(1, 3) : 0; k > 0; k--) {
    const e = r.rng.pick(kinds);
    exits.push({ at: e.at, process: e.process, code: e.code, signal: e.signal ?? null, lastLines: e.lastLines });
  }
  return exits;
}

function drawChecks(r: Run, names: string[]): CheckResult[] {
  const checks: CheckResult[] = [];
  for (const name of names) {
    if (r.bad(0.1)) continue; // not made
    const violations = r.bad(0.2) ? [`${name.slice(0, 20)}: broken`] : [];
    checks.push({ name, ok: violations.length === 0, violations, violationCount: violations.length });
  }
  return checks;
}

/** Evidence of a run drawn from `seed`: see the comment at the top. */
export function untidyEvidence(seed: number): JudgeInput {
  const rng = new Rng(seed);
  const durationSeconds = rng.pick([20, 60, 120]);
  const mess = rng.pick([0, 0.3, 1]);
  const r: Run = {
    rng,
    bad: (p) => rng.chance(p * mess),
    start: 1_800_000_000_000,
    spanMs: durationSeconds * 1000,
    bounce: ['bounce-1@chaos.test'],
    faults: [],
  };
  if (rng.chance(0.5)) r.bounce.push('bounce-2@chaos.test');
  const { planned, faults } = drawFaults(r);
  r.faults = faults;
  const bookings = drawBookings(r, rng.int(5, rng.chance(0.5) ? 60 : 400));
  const clientBookings = bookings.flatMap((b) => (b.client ? [b.client] : []));
  const rows = bookings.flatMap((b) => (b.row ? [b.row] : []));
  const eventsRan = rng.chance(0.8);
  const eventChecks = Object.values(EVENT_CHECKS).filter((n) => n !== EVENT_CHECKS.emailPace);
  return {
    durationSeconds,
    mailDomain: DOMAIN,
    bounceEmails: r.bounce.map((e) => (rng.chance(0.3) ? e.toUpperCase() : e)),
    handledTopics: ['booking.created', 'booking.cancelled'],
    bookings: rows,
    outbox: drawOutbox(r, bookings),
    overlaps: r.bad(0.2) ? [{ a: rows[0]!.publicId, b: rows[1]?.publicId ?? 'x', propertyId: '7' }] : [],
    records: drawMail(r, bookings),
    clientBookings,
    lookups: drawLookups(r, clientBookings),
    serverErrors: r.bad(0.3) ? [{ at: r.start + 5_000, route: 'POST /bookings', status: 500, body: 'x'.repeat(300) }] : [],
    clientsGaveUp: r.bad(0.2) ? rng.int(1, 3) : 0,
    idempotencyMismatches: r.bad(0.2) ? ['key k1: 201 then 409'] : [],
    faultsPlanned: planned,
    faults,
    unplannedExits: drawExits(r),
    drained: !r.bad(0.1),
    events: eventsRan ? { checks: drawChecks(r, eventChecks) } : null,
    webhooks: { checks: drawChecks(r, Object.values(WEBHOOK_CHECKS)) },
  };
}
