import { describe, expect, it } from 'vitest';
import { emailMessageId } from '../../../src/mail/mailer.ts';
import type { SinkRecord } from '../../../scripts/chaos/smtp-sink.ts';
import { EVENT_CHECKS, WEBHOOK_CHECKS } from '../../../scripts/chaos/checks.ts';
import type { BookingRow, ClientRecord, JudgeInput, OutboxRow } from '../../../scripts/chaos/evidence.ts';
import { EVENT_FAULT_KINDS, FAULT_KINDS, type FaultKind, type FaultOutcome } from '../../../scripts/chaos/fault-kinds.ts';
import { expectedMessageId } from '../../../scripts/chaos/mail.ts';
import { minimums } from '../../../scripts/chaos/minimums.ts';
import { postgresCrashes } from '../../../scripts/chaos/postgres-crashes.ts';
import { judge } from '../../../scripts/chaos/verdict.ts';

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
    clientBookings.push({
      id,
      guestEmail: guest,
      hostEmail: host,
      checkIn: '2027-01-01',
      checkOut: '2027-01-03',
      status: cancelled ? 'cancelled' : 'confirmed',
    });
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
      outbox.push({
        publicId: uuid(1000 + n++),
        topic: 'booking.cancelled',
        key: id,
        status: 'DONE',
        attempts: 1,
        lastError: null,
        handlersDone: ['email.guest-cancellation', 'email.host-cancellation'],
      });
      accept('booking.cancelled', id, 'email.guest-cancellation', guest);
      accept('booking.cancelled', id, 'email.host-cancellation', host);
    }
  }
  records.push({ kind: 'rejected', at: 0, code: 451, messageId: '<whatever@stayhub.test>', to: ['guest-0@chaos.test'] });

  const faultsPlanned: Record<FaultKind, number> = {
    'worker-kill': 2,
    'api-kill': 1,
    'smtp-outage': 1,
    'pg-restart': 1,
    'pg-terminate-workers': 1,
    'consumer-kill': 2,
    'nats-outage': 1,
    'stream-delete': 1,
    'forged-event': 2,
    'nats-node-kill': 2,
    'nats-node-wipe': 1,
  };
  const targets: Record<FaultKind, string> = {
    'worker-kill': 'worker-',
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
  const faults: FaultOutcome[] = [];
  let t = 1_000;
  for (const kind of FAULT_KINDS) {
    for (let k = 0; k < faultsPlanned[kind]; k++) {
      const target = kind === 'worker-kill' ? `worker-${k}` : targets[kind];
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
    lookups: clientBookings.map((c) => ({
      id: c.id,
      httpStatus: 200,
      body: { status: c.status, checkIn: c.checkIn, checkOut: c.checkOut },
    })),
    serverErrors: [],
    clientsGaveUp: 0,
    idempotencyMismatches: [],
    faultsPlanned,
    faults,
    unplannedExits: [],
    drained: true,
    events: { checks: Object.values(EVENT_CHECKS).map((name) => ({ name, ok: true, violations: [], violationCount: 0 })) },
    webhooks: { checks: Object.values(WEBHOOK_CHECKS).map((name) => ({ name, ok: true, violations: [], violationCount: 0 })) },
  };
}

const broken = (input: JudgeInput) =>
  judge(input)
    .checks.filter((c) => !c.ok)
    .map((c) => c.name);

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
    expect(broken(run)).toEqual([
      expect.stringMatching(/^every booking and every cancellation/),
      expect.stringMatching(/^no email to anyone else/),
    ]);
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

    // PostgreSQL's own crashes, read from its log (scripts/chaos/postgres-crashes.ts); its
    // connections terminated by a fault are not crashes.
    const log = [
      '2026-12-03 22:24:35.849 UTC [20897] LOG:  client backend (PID 21083) was terminated by signal 11: Segmentation fault',
      '2026-12-03 22:24:35.849 UTC [20897] DETAIL:  Failed process was running: ',
      "\t  with pending as (select min(created_at) as lo from outbox where status = 'PENDING')",
      '2026-12-03 22:24:35.849 UTC [20897] LOG:  terminating any other active server processes',
      '2026-12-03 22:26:01.997 UTC [23260] FATAL:  terminating connection due to administrator command',
    ].join('\n');
    const crashes = postgresCrashes(log);
    expect(crashes).toEqual([
      {
        process: 'postgres',
        at: Date.parse('2026-12-03T22:24:35.849Z'),
        code: null,
        signal: 'signal 11',
        lastLines: [
          'client backend (PID 21083) was terminated by signal 11: Segmentation fault',
          "Failed process was running:  with pending as (select min(created_at) as lo from outbox where status = 'PENDING')",
        ],
      },
    ]);
    expect(broken({ ...goodRun(), unplannedExits: crashes })).toEqual([expect.stringMatching(/^no process crashed/)]);
    expect(postgresCrashes(log.split('\n').slice(3).join('\n'))).toEqual([]);

    const refusedWhileDown = {
      ...goodRun(),
      unplannedExits: [{ process: 'worker-1', code: 1, signal: null, lastLines: ['cannot reach the database'] }],
    };
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
    const planned = {
      'worker-kill': 40,
      'api-kill': 7,
      'smtp-outage': 5,
      'pg-restart': 1,
      'pg-terminate-workers': 20,
      'consumer-kill': 20,
      'nats-outage': 7,
    };
    const long = minimums(600, planned, true);
    const short = minimums(30, planned, true);
    expect(long.bookings).toBeGreaterThan(short.bookings);
    expect(long.emailsExpected).toBeGreaterThan(long.bookings);
    expect(long.faults['worker-kill']).toBe(30);
    expect(long.faults['consumer-kill']).toBe(15);
    expect(long.faults['nats-outage']).toBe(6);
    expect(
      minimums(30, { 'worker-kill': 0, 'api-kill': 0, 'smtp-outage': 0, 'pg-restart': 0, 'pg-terminate-workers': 0 }, true).faults[
        'api-kill'
      ],
    ).toBe(1);
    expect(minimums(30, {}, true).faults['nats-outage']).toBe(1);
    // Without the events part its kinds are not required; every other kind still is.
    const without = minimums(600, planned, false);
    expect(EVENT_FAULT_KINDS.map((k) => without.faults[k])).toEqual(EVENT_FAULT_KINDS.map(() => 0));
    expect(without.faults['worker-kill']).toBe(30);
  });
});

describe('the chaos verdict: webhooks', () => {
  it('fails when a webhooks check is broken, and only that check is', () => {
    for (const name of Object.values(WEBHOOK_CHECKS)) {
      const run = goodRun();
      run.webhooks = {
        checks: run.webhooks.checks.map((c) =>
          c.name === name ? { ...c, ok: false, violations: ['never arrived: e1 booking.created b1'], violationCount: 1 } : c,
        ),
      };
      expect(judge(run).ok, name).toBe(false);
      expect(broken(run), name).toEqual([name]);
    }
  });

  it('fails when a webhooks check was not made', () => {
    const run = { ...goodRun(), webhooks: { checks: [] } };
    expect(broken(run)).toEqual(Object.values(WEBHOOK_CHECKS));
    expect(judge(run).checks.find((c) => c.name === WEBHOOK_CHECKS.owed)!.violations).toEqual(['this check was not made']);
  });
});

describe('the chaos verdict: the events path', () => {
  it('fails when an events check is BROKEN, and only that check is', () => {
    for (const name of Object.values(EVENT_CHECKS).filter((n) => n !== EVENT_CHECKS.emailPace)) {
      const run = goodRun();
      run.events = {
        checks: run.events!.checks.map((c) =>
          c.name === name ? { ...c, ok: false, violations: ['x is in the stream 2 time(s)'], violationCount: 1 } : c,
        ),
      };
      const v = judge(run);
      expect(v.ok, name).toBe(false);
      expect(broken(run), name).toEqual([name]);
    }
  });

  it('fails when the events part ran but a check of it was not made', () => {
    const run = goodRun();
    run.events = { checks: run.events!.checks.filter((c) => c.name !== EVENT_CHECKS.ledger) };
    expect(judge(run).ok).toBe(false);
    expect(broken(run)).toEqual([EVENT_CHECKS.ledger]);
    expect(judge(run).checks.find((c) => c.name === EVENT_CHECKS.ledger)!.violations).toEqual(['this check was not made']);

    // The email pace is the judge's own check (from the clients' and the SMTP server's records): never missing.
    const none = { ...goodRun(), events: { checks: [] } };
    expect(broken(none)).toEqual(Object.values(EVENT_CHECKS).filter((n) => n !== EVENT_CHECKS.emailPace));
  });

  it('does not count an events fault without evidence (a consumer kill that found no process, a NATS stop with no exit seen)', () => {
    for (const kind of EVENT_FAULT_KINDS) {
      const run = goodRun();
      // Every fault of this kind ran but showed no effect.
      run.faults = run.faults.map((f) => (f.kind === kind ? { ...f, evidence: null } : f));
      const v = judge(run);
      expect(v.faults.withEvidence[kind], kind).toBe(0);
      expect(v.faults.withoutEffect, kind).toBe(run.faultsPlanned[kind]);
      expect(v.ok, kind).toBe(false);
      expect(broken(run), kind).toEqual([expect.stringMatching(/^the run had something to judge/)]);
      const floor = v.checks.find((c) => c.name.startsWith('the run had something to judge'))!;
      expect(floor.violations, kind).toEqual([expect.stringMatching(new RegExp(`^0 ${kind} fault\\(s\\) with evidence`))]);
    }
    // One of the two consumer kills without effect: 1 counted, below the minimum of 2 (¾ of 2, rounded up).
    const one = goodRun();
    const i = one.faults.findIndex((f) => f.kind === 'consumer-kill');
    one.faults[i] = { ...one.faults[i]!, evidence: null };
    expect(judge(one).faults.withEvidence['consumer-kill']).toBe(1);
    expect(judge(one).ok).toBe(false);
  });

  it('with the events part skipped (no nats-server, not CI): no events faults or checks are required, nor counted as missing', () => {
    const run = goodRun();
    run.events = null;
    run.faults = run.faults.filter((f) => !EVENT_FAULT_KINDS.includes(f.kind));
    run.faultsPlanned = { ...run.faultsPlanned, 'consumer-kill': 0, 'nats-outage': 0, 'stream-delete': 0, 'forged-event': 0 };
    const v = judge(run);
    expect(v.checks.filter((c) => !c.ok)).toEqual([]);
    expect(v.checks.some((c) => c.name.startsWith('events:'))).toBe(false);
    // The same run claiming the events part ran fails: its faults and checks are then required.
    expect(broken({ ...run, events: { checks: [] } })).toEqual([
      expect.stringMatching(/^the run had something to judge/),
      ...Object.values(EVENT_CHECKS).filter((n) => n !== EVENT_CHECKS.emailPace),
    ]);
  });

  it("allows the consumer's refusal to start while NATS is down, and only then", () => {
    const run = goodRun();
    const outage = run.faults.find((f) => f.kind === 'nats-outage')!;
    const refusal = {
      process: 'earnings-consumer',
      code: 1,
      signal: null,
      lastLines: ['consume:earnings: cannot reach NATS at 127.0.0.1:4222: CONNECTION_REFUSED'],
    };
    expect(judge({ ...run, unplannedExits: [{ ...refusal, at: outage.startedAt + 100 }] }).ok).toBe(true);
    // Long after the outage, or with no time: a crash.
    expect(broken({ ...run, unplannedExits: [{ ...refusal, at: outage.endedAt + 60_000 }] })).toEqual([
      expect.stringMatching(/^no process crashed/),
    ]);
    expect(broken({ ...run, unplannedExits: [refusal] })).toEqual([expect.stringMatching(/^no process crashed/)]);
    // During an outage that showed no effect: a crash (and the outage is not counted either).
    const noEffect = {
      ...run,
      faults: run.faults.map((f) => (f === outage ? { ...f, evidence: null } : f)),
      unplannedExits: [{ ...refusal, at: outage.startedAt + 100 }],
    };
    expect(broken(noEffect)).toEqual([
      expect.stringMatching(/^the run had something to judge/),
      expect.stringMatching(/^no process crashed/),
    ]);
    // nats-server itself exiting on its own is a crash.
    const natsCrash = {
      ...run,
      unplannedExits: [{ process: 'nats-server', at: outage.startedAt + 100, code: 1, signal: null, lastLines: ['[FTL] boom'] }],
    };
    expect(broken(natsCrash)).toEqual([expect.stringMatching(/^no process crashed/)]);
  });
});
