import { describe, expect, it } from 'vitest';
import type { SinkRecord } from '../../../scripts/chaos/smtp-sink.ts';
import { EVENT_CHECKS } from '../../../scripts/chaos/checks.ts';
import type { ClientRecord } from '../../../scripts/chaos/evidence.ts';
import type { FaultKind, FaultOutcome } from '../../../scripts/chaos/fault-kinds.ts';
import { expectedMessageId } from '../../../scripts/chaos/mail.ts';
import { emailPace, PACE_BESIDE_MS, PACE_MIN_DURING } from '../../../scripts/chaos/rules/email-pace.ts';

/*
 * The chaos verdict's "emails kept their pace during NATS outages", fed synthetic runs: the pace
 * of a healthy relay passes; a relay that holds the workers' slots while NATS is down, or a
 * cancellation that waits for its booking's relay, fails; a fault that delays mail by itself (a
 * worker kill) is kept out of the comparison rather than blamed on the outage.
 */

const DOMAIN = 'stayhub.test';
const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const OUTAGE: [number, number] = [100_000, 104_000];

interface Made {
  clientBookings: ClientRecord[];
  records: SinkRecord[];
}

/** A booking answered at `at` whose two emails arrive `waitMs` later; cancelled at `cancelAt` with its emails `cancelWaitMs` later. */
function booking(run: Made, i: number, at: number, waitMs: number, cancel?: { at: number; waitMs: number }) {
  const c: ClientRecord = {
    id: uuid(i),
    guestEmail: `guest-${i % 5}@chaos.test`,
    hostEmail: `host-${i % 3}@chaos.test`,
    checkIn: '2027-01-01',
    checkOut: '2027-01-02',
    status: cancel ? 'cancelled' : 'confirmed',
    answeredAt: at,
    cancelledAt: cancel?.at,
  };
  run.clientBookings.push(c);
  const accept = (topic: 'booking.created' | 'booking.cancelled', handler: string, to: string, when: number) =>
    run.records.push({
      kind: 'accepted',
      at: when,
      messageId: expectedMessageId(topic, c.id, handler, DOMAIN),
      idempotencyKey: null,
      to: [to],
    });
  accept('booking.created', 'email.guest-confirmation', c.guestEmail, at + waitMs);
  accept('booking.created', 'email.host-new-booking', c.hostEmail, at + waitMs + 20);
  if (cancel) {
    accept('booking.cancelled', 'email.guest-cancellation', c.guestEmail, cancel.at + cancel.waitMs);
    accept('booking.cancelled', 'email.host-cancellation', c.hostEmail, cancel.at + cancel.waitMs + 20);
  }
}

/** A fault as the injector reports it; a NATS outage is an isolated one (the only kind judged) unless `isolated` is false. */
const fault = (
  kind: FaultKind,
  [startedAt, endedAt]: [number, number],
  evidence: string | null = 'seen',
  isolated = true,
): FaultOutcome => ({
  kind,
  target: kind,
  startedAt,
  endedAt,
  detail: kind,
  evidence,
  ...(kind === 'nats-outage' ? { isolated } : {}),
});

/**
 * 150 bookings across the minute around the outage (0.2–0.49 s to the SMTP server, or `besideWaitMs`
 * plus that), one in three cancelled later (same pace), and `during` bookings answered while NATS
 * is down, each cancelled within the outage too, with the waits given.
 */
function run(o: { duringWaitMs: number; cancelDuringWaitMs?: number; during?: number; besideWaitMs?: number; faults?: FaultOutcome[] }) {
  const made: Made = { clientBookings: [], records: [] };
  for (let i = 0; i < 150; i++) {
    const at = OUTAGE[0] - 30_000 + i * 400;
    if (at >= OUTAGE[0] - 1_000 && at <= OUTAGE[1] + 5_000) continue;
    const wait = (o.besideWaitMs ?? 0) + 200 + (i % 30) * 10;
    booking(made, i, at, wait, i % 3 === 0 ? { at: at + 300, waitMs: wait + 50 + (i % 20) * 10 - (i % 30) * 10 } : undefined);
  }
  const n = o.during ?? 20;
  for (let k = 0; k < n; k++) {
    const at = OUTAGE[0] + 100 + k * 150;
    booking(made, 1000 + k, at, o.duringWaitMs, { at: at + 50, waitMs: o.cancelDuringWaitMs ?? o.duringWaitMs });
  }
  return {
    ...made,
    mailDomain: DOMAIN,
    bounceEmails: [],
    faults: o.faults ?? [fault('nats-outage', OUTAGE)],
  };
}

/**
 * Two isolated outages 200 s apart: run()'s quiet one, and a second behind a backlog that holds
 * every email 30 s, beside the outage as during it, where its mail waits `backlogDuringMs`.
 */
function twoOutages(backlogDuringMs: number) {
  const quiet = run({ duringWaitMs: 350 });
  const backlog = run({ duringWaitMs: backlogDuringMs, besideWaitMs: 30_000 });
  const later = (t: number) => t + 200_000;
  const renamed = (text: string) => text.replace(/00000000-0000-4000/g, '11111111-0000-4000');
  return {
    ...quiet,
    clientBookings: [
      ...quiet.clientBookings,
      ...backlog.clientBookings.map((c) => ({
        ...c,
        id: renamed(c.id),
        answeredAt: later(c.answeredAt!),
        cancelledAt: c.cancelledAt === undefined ? undefined : later(c.cancelledAt),
      })),
    ],
    records: [...quiet.records, ...backlog.records.map((r) => ({ ...r, at: later(r.at), messageId: renamed(r.messageId!) }))],
    faults: [fault('nats-outage', OUTAGE), fault('nats-outage', [later(OUTAGE[0]), later(OUTAGE[1])])],
  };
}

/** Emails (two a booking) of the bookings run() answers within PACE_BESIDE_MS of OUTAGE, outside its margin. */
const BESIDE_BOOKINGS = Array.from({ length: 150 }, (_, i) => OUTAGE[0] - 30_000 + i * 400).filter(
  (at) => (at >= OUTAGE[0] - PACE_BESIDE_MS && at < OUTAGE[0] - 1_000) || (at > OUTAGE[1] + 5_000 && at <= OUTAGE[1] + PACE_BESIDE_MS),
).length;

describe('the chaos verdict: emails kept their pace during NATS outages', () => {
  it('holds when the mail answered during the outage goes out as fast as the rest', () => {
    const { check, figures } = emailPace(run({ duringWaitMs: 350 }));
    expect(check).toMatchObject({ name: EVENT_CHECKS.emailPace, ok: true });
    expect(figures.bookings).toMatchObject({ judged: true, during: { n: 40, p95Ms: 370 }, beside: { n: 2 * BESIDE_BOOKINGS } });
    // Twice the p95 beside is under a second here: the floor is that p95 plus 2 s.
    expect(figures.bookings.limitMs).toBe(figures.bookings.beside.p95Ms! + 2_000);
    expect(figures.cancellations.judged).toBe(true);
  });

  it('fails when the relay holds the workers while NATS is down (every email answered then waits seconds)', () => {
    // A relay blocking its slot for a 1 s publish timeout per attempt piles the queue up: seconds of wait.
    const { check, figures } = emailPace(run({ duringWaitMs: 3_500 }));
    expect(check.ok).toBe(false);
    expect(check.violations).toEqual([
      expect.stringMatching(
        /^bookings, the outage at 1970-01-01T00:01:40\.000Z: p95 3\.52 s over 40 emails answered during it, above 2\.\d\d s/,
      ),
      expect.stringMatching(/^cancellations, the outage at 1970-01-01T00:01:40\.000Z: p95 3\.52 s/),
    ]);
    expect(figures.bookings.during.p95Ms).toBe(3_520);
  });

  it("fails on cancellations alone when they wait for their booking's relay while their bookings' mail is on time", () => {
    const { check } = emailPace(run({ duringWaitMs: 300, cancelDuringWaitMs: 4_000 }));
    expect(check.ok).toBe(false);
    expect(check.violations).toEqual([
      expect.stringMatching(/^cancellations, the outage at 1970-01-01T00:01:40\.000Z: p95 4\.02 s over 40 emails/),
    ]);
  });

  it('scales with a slow machine: twice the p95 beside, when that is more than 2 s above it', () => {
    const slow = run({ duringWaitMs: 5_000, besideWaitMs: 3_000 });
    const { check, figures } = emailPace(slow);
    expect(figures.bookings.limitMs).toBe(2 * figures.bookings.beside.p95Ms!);
    expect(check.ok).toBe(true);
  });

  it('compares the outage with its own stretch of the run: a backlog that slows every email beside it is not blamed on NATS', () => {
    // Seed 20261203: an outage inside the backlog a PostgreSQL restart left; every email answered in
    // that stretch waited ~23 s, while the run's quiet stretches went out in under a second.
    const input = run({ duringWaitMs: 23_000, besideWaitMs: 22_500 });
    for (let i = 0; i < 4000; i++) booking(input, 5000 + i, 300_000 + i * 50, 300 + (i % 10) * 20);
    const { check, figures } = emailPace(input);
    expect(check.ok).toBe(true);
    expect(figures.bookings.beside.n).toBe(2 * BESIDE_BOOKINGS);
    // The limit comes from the outage's own stretch, not from the quiet one (whose p95 is 0.48 s).
    expect(figures.bookings.beside.p95Ms).toBeGreaterThan(22_500);
  });

  it('still fails a relay that holds the workers inside a backlog: the outage adds seconds to its neighbours', () => {
    const { check } = emailPace(run({ duringWaitMs: 12_000, besideWaitMs: 4_000 }));
    expect(check.ok).toBe(false);
    expect(check.violations[0]).toMatch(
      /^bookings, the outage at 1970-01-01T00:01:40\.000Z: p95 12\.02 s over 40 emails answered during it, above 8\.98 s \(p95 4\.49 s over \d+ emails answered beside it\)/,
    );
  });

  it('keeps mail answered around a worker kill out of both samples instead of blaming the outage', () => {
    // A worker killed mid-batch in the outage: its claimed messages wait for the lease (5 s).
    const kill = fault('worker-kill', [OUTAGE[0] + 200, OUTAGE[0] + 1_500]);
    const input = run({ duringWaitMs: 300, faults: [fault('nats-outage', OUTAGE), kill] });
    for (const r of input.records) {
      if (r.kind !== 'accepted') continue;
      const c = input.clientBookings.find((b) => r.messageId!.includes(b.id))!;
      if (c.answeredAt! >= OUTAGE[0] && c.answeredAt! <= OUTAGE[0] + 1_500) r.at += 5_000;
    }
    const { check, figures } = emailPace(input);
    expect(check.ok).toBe(true);
    expect(figures.excluded).toBeGreaterThan(0);
    expect(figures.bookings.during.n).toBeGreaterThanOrEqual(PACE_MIN_DURING);
    // Without the kill on record, the same delays are blamed on the outage.
    expect(emailPace({ ...input, faults: [fault('nats-outage', OUTAGE)] }).check.ok).toBe(false);
  });

  it('keeps out mail whose wait runs into a later fault, not only mail answered in its span', () => {
    // Faults on one target queue behind each other: a node kill starts as the outage ends, and mail
    // answered late in the outage waits through the election after it (seed 42, 120 s).
    const kill = fault('nats-node-kill', [OUTAGE[1], OUTAGE[1] + 5_000]);
    const input = run({ duringWaitMs: 350, faults: [fault('nats-outage', OUTAGE), kill] });
    const late = (at: number) => at >= OUTAGE[0] + 2_000 && at <= OUTAGE[1];
    for (const r of input.records) {
      if (r.kind !== 'accepted') continue;
      const c = input.clientBookings.find((b) => r.messageId!.includes(b.id))!;
      if (late(c.answeredAt!)) r.at += 4_000; // answered before the kill's span, delivered inside it
    }
    const { check, figures } = emailPace(input);
    expect(check.ok).toBe(true);
    expect(figures.bookings).toMatchObject({ judged: true, during: { p95Ms: 370 } });
    expect(figures.excluded).toBeGreaterThan(0);
    // Judged on the answer alone (no kill on record to overlap), the same mail is blamed on the outage.
    expect(emailPace({ ...input, faults: [fault('nats-outage', OUTAGE)] }).check.ok).toBe(false);
  });

  it('does not judge from too few emails, nor count an outage without evidence', () => {
    const few = emailPace(run({ duringWaitMs: 9_000, during: 2 }));
    expect(few.check.ok).toBe(true);
    expect(few.figures.bookings).toMatchObject({ judged: false, limitMs: null, during: { n: 4 } });
    // Held, and the report says it was not judged rather than a bare "held".
    expect(few.check.note).toMatch(/^not judged: fewer than 5 emails answered during any isolated NATS outage/);
    expect(emailPace(run({ duringWaitMs: 350 })).check.note).toBeUndefined();
    const noEffect = emailPace(run({ duringWaitMs: 9_000, faults: [fault('nats-outage', OUTAGE, null)] }));
    expect(noEffect.figures.bookings.during.n).toBe(0);
    // Nor is an outage without evidence a stretch to compare with.
    expect(noEffect.figures.bookings.beside.n).toBe(0);
  });

  it('judges only isolated outages: one ringed by other faults is in neither sample', () => {
    // The same slow mail during an outage the injector did not keep apart from other faults.
    const ringed = emailPace(run({ duringWaitMs: 9_000, faults: [fault('nats-outage', OUTAGE, 'seen', false)] }));
    expect(ringed.check.ok).toBe(true);
    expect(ringed.figures.bookings).toMatchObject({ judged: false, during: { n: 0 }, beside: { n: 0 } });
    expect(ringed.check.note).toMatch(/^not judged: fewer than 5 emails answered during any isolated NATS outage/);
    // Beside an isolated outage, the mail of a ringed one is not taken for its neighbours' pace either.
    const second: [number, number] = [OUTAGE[1] + 8_000, OUTAGE[1] + 10_000];
    const both = run({ duringWaitMs: 350, faults: [fault('nats-outage', OUTAGE), fault('nats-outage', second, 'seen', false)] });
    for (const r of both.records) {
      const c = both.clientBookings.find((b) => r.messageId!.includes(b.id))!;
      if (c.answeredAt! >= second[0] && c.answeredAt! <= second[1]) r.at += 9_000;
    }
    const judged = emailPace(both);
    expect(judged.check.ok).toBe(true);
    expect(judged.figures.bookings.beside.p95Ms).toBeLessThan(1_000);
  });

  it("judges each isolated outage against its own neighbours, never one outage's mail against another's", () => {
    const pooledFailing = twoOutages(31_000);
    const { check, figures } = emailPace(pooledFailing);
    expect(check.violations).toEqual([]);
    expect(figures.outages.map((o) => [o.bookings.judged, o.bookings.during.p95Ms])).toEqual([
      [true, 370],
      [true, 31_020],
    ]);
    // Pooled, the second outage's mail was measured against mostly the first one's neighbours.
    expect(figures.outages[1]!.bookings.during.p95Ms).toBeGreaterThan(2 * figures.outages[0]!.bookings.beside.p95Ms! + 2_000);
    // The outage behind the backlog still fails when its own mail waits far longer than its neighbours'.
    const slow = emailPace(twoOutages(75_000));
    expect(slow.check.violations).toEqual([
      expect.stringMatching(/^bookings, the outage at 1970-01-01T00:05:00\.000Z/),
      expect.stringMatching(/^cancellations, the outage at 1970-01-01T00:05:00\.000Z/),
    ]);
  });

  it('leaves lost mail and the 550 recipients to the other checks', () => {
    const input = run({ duringWaitMs: 300 });
    const bounce = input.clientBookings.at(-1)!.guestEmail;
    const lost = input.clientBookings.at(-2)!.id;
    const trimmed = { ...input, bounceEmails: [bounce], records: input.records.filter((r) => !r.messageId?.includes(lost)) };
    const { check, figures } = emailPace(trimmed);
    expect(check.ok).toBe(true);
    expect(figures.bookings.during.n).toBeLessThan(40);
  });
});
