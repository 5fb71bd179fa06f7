import { describe, expect, it } from 'vitest';
import { emailMessageId } from '../../src/mail/mailer.ts';
import type { SinkRecord } from '../../scripts/chaos/smtp-sink.ts';
import {
  expectedMessageId,
  FAULT_KINDS,
  judge,
  minimums,
  type BookingRow,
  type ClientRecord,
  type FaultKind,
  type FaultOutcome,
  type JudgeInput,
  type OutboxRow,
} from '../../scripts/chaos/verdict.ts';

/*
 * The chaos verdict fed the bad cases directly: each way a run could pass when it should not
 * (nothing to judge, mail to the wrong person, a check reported but not counted, a fault that
 * did nothing) must come out FAIL, and the check that says so must be the one that broke.
 */

const DOMAIN = 'stayhub.test';
const BOUNCE = 'bounce-1@chaos.test';
const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;

/** A small run where every invariant holds: 12 bookings, 3 cancelled, one by a 550 guest. */
function goodRun(): JudgeInput {
  const bookings: BookingRow[] = [];
  const outbox: OutboxRow[] = [];
  const records: SinkRecord[] = [];
  const clientBookings: ClientRecord[] = [];
  let n = 0;
  const accept = (topic: 'booking.created' | 'booking.cancelled', id: string, handler: string, to: string) =>
    records.push({ kind: 'accepted', at: 0, messageId: expectedMessageId(topic, id, handler, DOMAIN), idempotencyKey: null, to: [to] });
  for (let i = 0; i < 12; i++) {
    const id = uuid(i);
    const guest = i === 11 ? BOUNCE : `guest-${i % 3}@chaos.test`;
    const host = `host-${i % 2}@chaos.test`;
    const cancelled = i % 4 === 1;
    bookings.push({ publicId: id, status: cancelled ? 'cancelled' : 'confirmed', guestEmail: guest, hostEmail: host });
    clientBookings.push({ id, guestEmail: guest, hostEmail: host, checkIn: '2027-01-01', checkOut: '2027-01-03', status: cancelled ? 'cancelled' : 'confirmed' });
    const bounces = guest === BOUNCE;
    outbox.push({
      publicId: uuid(1000 + n++),
      topic: 'booking.created',
      key: id,
      status: bounces ? 'DEAD' : 'DONE',
      attempts: 1,
      lastError: bounces ? 'email.guest-confirmation: Error(EENVELOPE): 550 5.1.1 Mailbox does not exist (chaos)' : null,
      handlersDone: bounces ? ['email.host-new-booking'] : ['email.guest-confirmation', 'email.host-new-booking'],
    });
    if (bounces) records.push({ kind: 'rejected', at: 0, code: 550, messageId: null, to: [BOUNCE] });
    else accept('booking.created', id, 'email.guest-confirmation', guest);
    accept('booking.created', id, 'email.host-new-booking', host);
    if (cancelled) {
      outbox.push({ publicId: uuid(1000 + n++), topic: 'booking.cancelled', key: id, status: 'DONE', attempts: 1, lastError: null, handlersDone: ['email.guest-cancellation', 'email.host-cancellation'] });
      accept('booking.cancelled', id, 'email.guest-cancellation', guest);
      accept('booking.cancelled', id, 'email.host-cancellation', host);
    }
  }
  records.push({ kind: 'rejected', at: 0, code: 451, messageId: '<whatever@stayhub.test>', to: ['guest-0@chaos.test'] });

  const faultsPlanned: Record<FaultKind, number> = { 'worker-kill': 2, 'api-kill': 1, 'smtp-outage': 1, 'pg-restart': 1, 'pg-terminate-workers': 1 };
  const faults: FaultOutcome[] = [];
  let t = 1_000;
  for (const kind of FAULT_KINDS) {
    for (let k = 0; k < faultsPlanned[kind]; k++) {
      const target = kind === 'worker-kill' ? `worker-${k}` : kind.startsWith('pg-') ? 'postgres' : kind === 'api-kill' ? 'api' : 'smtp';
      faults.push({ kind, target, startedAt: t, endedAt: t + 500, detail: kind, evidence: `${kind} happened` });
      t += 1_000;
    }
  }
  return {
    durationSeconds: 20,
    mailDomain: DOMAIN,
    bounceEmails: [BOUNCE],
    handledTopics: ['booking.created', 'booking.cancelled'],
    bookings,
    outbox,
    overlaps: [],
    records,
    clientBookings,
    lookups: clientBookings.map((c) => ({ id: c.id, httpStatus: 200, body: { status: c.status, checkIn: c.checkIn, checkOut: c.checkOut } })),
    serverErrors: [],
    clientsGaveUp: 0,
    idempotencyMismatches: [],
    faultsPlanned,
    faults,
    unplannedExits: [],
    drained: true,
  };
}

const broken = (input: JudgeInput) => judge(input).checks.filter((c) => !c.ok).map((c) => c.name);

describe('the chaos verdict', () => {
  it('passes a run in which everything held (the baseline every case below breaks one thing of)', () => {
    const v = judge(goodRun());
    expect(v.checks.filter((c) => !c.ok)).toEqual([]);
    expect(v.ok).toBe(true);
    expect(v.mail).toMatchObject({ lost: 0, wrongRecipient: 0, unexpected: 0, refused451: 1, refused550: 1 });
    expect(v.mail.expected).toBe(v.mail.delivered);
  });

  it('fails an empty run: no bookings, no outbox, no mail, no faults', () => {
    const empty: JudgeInput = {
      ...goodRun(),
      bookings: [],
      outbox: [],
      records: [],
      clientBookings: [],
      lookups: [],
      faults: [],
    };
    const v = judge(empty);
    expect(v.ok).toBe(false);
    expect(broken(empty)).toEqual([expect.stringMatching(/^the run had something to judge/)]);
  });

  it('fails a run with too few bookings for its duration', () => {
    const run = { ...goodRun(), durationSeconds: 600 };
    expect(judge(run).ok).toBe(false);
    expect(broken(run)).toEqual([expect.stringMatching(/^the run had something to judge/)]);
  });

  it('fails when both emails of a booking went to another address (attacker@evil.test)', () => {
    const run = goodRun();
    const id = run.bookings[0]!.publicId;
    for (const r of run.records) if (r.kind === 'accepted' && r.messageId?.includes(id)) r.to = ['attacker@evil.test'];
    const v = judge(run);
    expect(v.ok).toBe(false);
    expect(v.mail.lost).toBe(2);
    expect(v.mail.wrongRecipient).toBe(2);
    expect(broken(run)).toEqual([expect.stringMatching(/^every booking and every cancellation/), expect.stringMatching(/^no email to anyone else/)]);
  });

  it('fails when an email also went to a second, wrong recipient', () => {
    const run = goodRun();
    const first = run.records.find((r) => r.kind === 'accepted')!;
    first.to = [...first.to, 'attacker@evil.test'];
    expect(broken(run)).toEqual([expect.stringMatching(/^no email to anyone else/)]);
  });

  it('fails when the guest email went to the host and the host email to the guest (right ids, swapped recipients)', () => {
    const run = goodRun();
    const id = run.bookings[0]!.publicId;
    for (const r of run.records) {
      if (r.kind !== 'accepted' || !r.messageId?.includes(id)) continue;
      r.to = [r.messageId.includes('guest-confirmation') ? run.bookings[0]!.hostEmail : run.bookings[0]!.guestEmail];
    }
    expect(judge(run).ok).toBe(false);
  });

  it("expects mail for a client's 201 even when the database lost the booking", () => {
    const run = goodRun();
    run.bookings = run.bookings.slice(1);
    run.outbox = run.outbox.filter((m) => m.key !== run.clientBookings[0]!.id);
    const v = judge(run);
    expect(v.ok).toBe(false);
    expect(broken(run)).toContain('every client that got a 201 finds its booking (GET /bookings/:id and the database), as it was told');
  });

  it('fails on a broken late check: a crash, an idempotency mismatch, a run that did not drain', () => {
    const crash = { ...goodRun(), unplannedExits: [{ process: 'worker-0', code: 1, signal: null, lastLines: ['TypeError: boom'] }] };
    expect(judge(crash).ok).toBe(false);
    expect(broken(crash)).toEqual([expect.stringMatching(/^no process crashed/)]);

    const refusedWhileDown = { ...goodRun(), unplannedExits: [{ process: 'worker-1', code: 1, signal: null, lastLines: ['cannot reach the database'] }] };
    expect(judge(refusedWhileDown).ok).toBe(true);

    const idem = { ...goodRun(), idempotencyMismatches: ['key k: 201 a vs 201 b'] };
    expect(judge(idem).ok).toBe(false);
    expect(broken(idem)).toEqual([expect.stringMatching(/^the same Idempotency-Key/)]);

    const notDrained = { ...goodRun(), drained: false };
    expect(judge(notDrained).ok).toBe(false);
  });

  it('does not count a fault with no effect: a kill of nothing, zero backends ended, an unchanged postmaster', () => {
    for (const kind of FAULT_KINDS) {
      const run = goodRun();
      run.faults = run.faults.map((f) => (f.kind === kind ? { ...f, evidence: null } : f));
      const v = judge(run);
      expect(v.ok, kind).toBe(false);
      expect(v.faults.withEvidence[kind]).toBe(0);
      expect(broken(run), kind).toEqual([expect.stringMatching(/^the run had something to judge/)]);
    }
  });

  it('fails when two faults hit one target at once', () => {
    const run = goodRun();
    const kill = run.faults.find((f) => f.kind === 'worker-kill')!;
    run.faults.push({ ...kill, startedAt: kill.startedAt + 100, endedAt: kill.endedAt + 100 });
    expect(broken(run)).toEqual(['never two faults on one target at once']);
  });

  it('fails when a client gave up (what it was told is unknown)', () => {
    const run = { ...goodRun(), clientsGaveUp: 1 };
    expect(broken(run)).toEqual([expect.stringMatching(/^the run had something to judge/)]);
  });

  it('fails on a 500, an overlap, a PENDING leftover, an unexpected DEAD', () => {
    expect(judge({ ...goodRun(), serverErrors: [{ at: 0, route: 'POST /bookings', status: 500, body: '' }] }).ok).toBe(false);
    expect(judge({ ...goodRun(), overlaps: [{ a: uuid(1), b: uuid(2), propertyId: '1' }] }).ok).toBe(false);
    const pending = goodRun();
    pending.outbox[0]!.status = 'PENDING';
    expect(broken(pending)).toContain('the outbox ends with nothing PENDING');
    const dead = goodRun();
    dead.outbox[0]!.status = 'DEAD';
    expect(broken(dead)).toContain("the 550 recipients' messages are DEAD with last_error, and nothing else is DEAD");
  });

  it('fails when a lost email is hidden among duplicates of another', () => {
    const run = goodRun();
    const i = run.records.findIndex((r) => r.kind === 'accepted');
    const other = run.records.find((r, k) => k > i && r.kind === 'accepted')!;
    run.records[i] = { ...other };
    const v = judge(run);
    expect(v.mail.lost).toBe(1);
    expect(v.mail.duplicates).toBe(1);
    expect(v.ok).toBe(false);
  });

  it("derives the Message-IDs the mail contract promises (the same as the system's helper today)", () => {
    const id = uuid(7);
    for (const [topic, key] of [
      ['booking.created', `booking-created:${id}`],
      ['booking.cancelled', `booking-cancelled:${id}`],
    ] as const) {
      for (const handler of ['email.guest-confirmation', 'email.host-new-booking']) {
        expect(expectedMessageId(topic, id, handler, DOMAIN)).toBe(emailMessageId(key, handler, `StayHub <no-reply@${DOMAIN}>`));
      }
    }
  });

  it('scales its minimums with the duration', () => {
    const planned = { 'worker-kill': 40, 'api-kill': 7, 'smtp-outage': 5, 'pg-restart': 1, 'pg-terminate-workers': 20 };
    const long = minimums(600, planned);
    const short = minimums(30, planned);
    expect(long.bookings).toBeGreaterThan(short.bookings);
    expect(long.emailsExpected).toBeGreaterThan(long.bookings);
    expect(long.faults['worker-kill']).toBe(30);
    expect(minimums(30, { 'worker-kill': 0, 'api-kill': 0, 'smtp-outage': 0, 'pg-restart': 0, 'pg-terminate-workers': 0 }).faults['api-kill']).toBe(1);
  });
});
