import type pg from 'pg';
import { emailMessageId } from '../../src/mail/mailer.ts';
import type { ApiClient } from './client.ts';
import type { ClientBooking, User } from './load.ts';
import type { SinkRecord } from './smtp-sink.ts';

/*
 * The invariants, checked after the workers have drained, from three independent sources: the
 * database (what happened), the SMTP server's record of accepted mail (what was delivered) and the
 * clients' notes (what they were told). Each check returns its violations; an empty list is a pass.
 */

export interface CheckResult {
  name: string;
  ok: boolean;
  /** A few examples of what broke, for the report. */
  violations: string[];
  violationCount: number;
}

/** The emails a booking's events must produce: handler name, which party, the event's key prefix. */
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

const KEY_PREFIX = { 'booking.created': 'booking-created', 'booking.cancelled': 'booking-cancelled' } as const;

export interface MailFigures {
  expected: number;
  delivered: number;
  deliveries: number;
  duplicates: number;
  /** Message-IDs delivered more than once. */
  duplicatedMessages: number;
  lost: number;
  unexpected: number;
  refusedPermanently: number;
  refused451: number;
  refused550: number;
}

export interface CheckInput {
  db: pg.Pool;
  api: ApiClient;
  mailFrom: string;
  records: SinkRecord[];
  bounceEmails: string[];
  clientBookings: ClientBooking[];
  /** Topics the worker has handlers for; a PENDING message of another topic is reported apart. */
  handledTopics: string[];
}

export interface CheckOutput {
  checks: CheckResult[];
  mail: MailFigures;
  outbox: { byTopicStatus: Record<string, number>; dead: number; pendingHandled: number; pendingUnhandled: number };
  bookings: { total: number; confirmed: number; cancelled: number };
  /** The messages that took longest from commit to DONE/DEAD: where the max pending age came from. */
  slowest: { topic: string; status: string; attempts: number; seconds: number; createdAt: string; lastError: string | null }[];
}

function result(name: string, violations: string[]): CheckResult {
  return { name, ok: violations.length === 0, violations: violations.slice(0, 10), violationCount: violations.length };
}

export async function runChecks(input: CheckInput): Promise<CheckOutput> {
  const { db } = input;
  const bounce = new Set(input.bounceEmails.map((e) => e.toLowerCase()));
  const checks: CheckResult[] = [];

  // --- what the database says happened
  const { rows: bookings } = await db.query<{
    public_id: string;
    status: 'confirmed' | 'cancelled';
    guest_email: string;
    host_email: string;
  }>(`select b.public_id, b.status, g.email as guest_email, h.email as host_email
        from bookings b
        join users g on g.id = b.guest_id
        join properties p on p.id = b.property_id
        join users h on h.id = p.host_id`);
  const { rows: outbox } = await db.query<{
    public_id: string;
    topic: string;
    key: string | null;
    status: string;
    attempts: number;
    last_error: string | null;
    handlers_done: string[];
    idempotency_key: string | null;
  }>(`select public_id, topic, key, status, attempts, last_error, handlers_done, payload->>'idempotencyKey' as idempotency_key
        from outbox`);

  // --- 1. Every booking has exactly one booking.created event; every cancelled one exactly one
  // booking.cancelled; no event without its booking (the outbox row and the booking are one commit).
  const events = new Map<string, typeof outbox>();
  for (const m of outbox) {
    if (m.topic !== 'booking.created' && m.topic !== 'booking.cancelled') continue;
    const k = `${m.topic}:${m.key}`;
    events.set(k, [...(events.get(k) ?? []), m]);
  }
  const bookingIds = new Set(bookings.map((b) => b.public_id));
  {
    const v: string[] = [];
    for (const b of bookings) {
      const created = events.get(`booking.created:${b.public_id}`) ?? [];
      const cancelled = events.get(`booking.cancelled:${b.public_id}`) ?? [];
      if (created.length !== 1) v.push(`booking ${b.public_id} has ${created.length} booking.created events`);
      if (b.status === 'cancelled' && cancelled.length !== 1) v.push(`cancelled booking ${b.public_id} has ${cancelled.length} booking.cancelled events`);
      if (b.status === 'confirmed' && cancelled.length !== 0) v.push(`confirmed booking ${b.public_id} has a booking.cancelled event`);
    }
    for (const m of outbox) {
      if ((m.topic === 'booking.created' || m.topic === 'booking.cancelled') && !bookingIds.has(m.key ?? '')) {
        v.push(`${m.topic} ${m.public_id} for a booking that does not exist (${m.key})`);
      }
    }
    checks.push(result('every booking has exactly its events in the outbox (same transaction)', v));
  }

  // --- 2. Emails: every expected one delivered at least once, unless its recipient bounces.
  const accepted = new Map<string, number>();
  let deliveries = 0;
  let refused451 = 0;
  let refused550 = 0;
  for (const r of input.records) {
    if (r.kind === 'accepted') {
      deliveries++;
      if (r.messageId) accepted.set(r.messageId, (accepted.get(r.messageId) ?? 0) + 1);
    } else if (r.code === 451) refused451++;
    else refused550++;
  }
  const expectedIds = new Set<string>();
  let lost = 0;
  let expectedCount = 0;
  let refusedPermanently = 0;
  const lostList: string[] = [];
  const bounceDelivered: string[] = [];
  for (const b of bookings) {
    const topics = b.status === 'cancelled' ? (['booking.created', 'booking.cancelled'] as const) : (['booking.created'] as const);
    for (const topic of topics) {
      for (const e of BOOKING_EMAILS[topic]) {
        const id = emailMessageId(`${KEY_PREFIX[topic]}:${b.public_id}`, e.handler, input.mailFrom);
        expectedIds.add(id);
        const recipient = (e.to === 'guest' ? b.guest_email : b.host_email).toLowerCase();
        if (bounce.has(recipient)) {
          refusedPermanently++;
          if (accepted.has(id)) bounceDelivered.push(`${id} was accepted for a 550 recipient`);
          continue;
        }
        expectedCount++;
        if (!accepted.has(id)) {
          lost++;
          lostList.push(`${topic} ${b.public_id}: ${e.handler} never delivered`);
        }
      }
    }
  }
  checks.push(result('every confirmed booking and every cancellation: guest and host emails delivered (zero lost)', lostList));
  const unexpectedIds = [...accepted.keys()].filter((id) => !expectedIds.has(id));
  checks.push(
    result('no email about anything that did not happen (every delivered Message-ID matches a committed event)', [
      ...unexpectedIds.map((id) => `unexpected Message-ID ${id}`),
      ...bounceDelivered,
    ]),
  );

  // --- 3. DEAD: exactly the events of the 550 recipients, each with last_error; nothing else.
  {
    const v: string[] = [];
    const bookingById = new Map(bookings.map((b) => [b.public_id, b]));
    for (const m of outbox) {
      const b = m.key ? bookingById.get(m.key) : undefined;
      const involvesBounce =
        !!b && (m.topic === 'booking.created' || m.topic === 'booking.cancelled') && bounce.has(b.guest_email.toLowerCase());
      if (involvesBounce) {
        if (m.status !== 'DEAD') v.push(`${m.topic} ${m.public_id} to a 550 recipient is ${m.status}, not DEAD`);
        else if (!m.last_error || !/550/.test(m.last_error)) v.push(`${m.topic} ${m.public_id} DEAD without a 550 in last_error: ${m.last_error}`);
        else if (/\S+@\S+\.\w+/.test(m.last_error)) v.push(`${m.topic} ${m.public_id} last_error shows an email address`);
        // The host's email of the same event must still have gone out (handlers are tracked apart).
        const hostHandler = m.topic === 'booking.created' ? 'email.host-new-booking' : 'email.host-cancellation';
        if (!m.handlers_done.includes(hostHandler)) v.push(`${m.topic} ${m.public_id}: ${hostHandler} not recorded done (last_error: ${m.last_error})`);
      } else if (m.status === 'DEAD') {
        v.push(`${m.topic} ${m.public_id} is DEAD after ${m.attempts} attempts: ${m.last_error}`);
      }
    }
    checks.push(result("the 550 recipients' messages are DEAD with last_error, and nothing else is DEAD", v));
  }

  // --- 4. Nothing PENDING at the end (for topics the worker handles).
  const handled = new Set(input.handledTopics);
  const pendingHandled = outbox.filter((m) => m.status === 'PENDING' && handled.has(m.topic));
  const pendingUnhandled = outbox.filter((m) => m.status === 'PENDING' && !handled.has(m.topic));
  checks.push(
    result(
      'the outbox ends with nothing PENDING',
      pendingHandled.map((m) => `${m.topic} ${m.public_id} still PENDING after ${m.attempts} attempts: ${m.last_error ?? ''}`),
    ),
  );

  // --- 5. No two confirmed bookings of a property overlap: checked with our own self-join, not
  // by trusting the exclusion constraint that is supposed to guarantee it.
  {
    const { rows } = await db.query<{ a: string; b: string; property_id: string }>(
      `select a.public_id as a, b.public_id as b, a.property_id
         from bookings a
         join bookings b on b.property_id = a.property_id and b.id > a.id
        where a.status = 'confirmed' and b.status = 'confirmed'
          and a.check_in < b.check_out and b.check_in < a.check_out`,
    );
    checks.push(result('no two confirmed bookings overlap (SQL self-join)', rows.map((r) => `${r.a} overlaps ${r.b} (property ${r.property_id})`)));
  }

  // --- 6. Every client that got a 201 finds its booking, in the state it was told.
  {
    const v: string[] = [];
    const queue = [...input.clientBookings];
    const one = async (cb: ClientBooking) => {
      const res = await input.api.call('GET', `/bookings/${cb.id}`, { token: (cb.guest as User).token, route: 'GET /bookings/:id', deadlineMs: 30_000 });
      if (res.status !== 200) v.push(`booking ${cb.id}: GET answered ${res.status}`);
      else if (!cb.cancelUncertain && res.body.status !== cb.status) v.push(`booking ${cb.id}: client was told ${cb.status}, API says ${res.body.status}`);
      else if (res.body.checkIn !== cb.checkIn || res.body.checkOut !== cb.checkOut) v.push(`booking ${cb.id}: dates differ`);
    };
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let cb = queue.shift(); cb; cb = queue.shift()) {
          try {
            await one(cb);
          } catch (err) {
            v.push(`booking ${cb.id}: ${String(err)}`);
          }
        }
      }),
    );
    checks.push(result('every client that got a 201 finds its booking (GET /bookings/:id), as it was told', v));
  }

  // --- 7. No request answered 500.
  checks.push(
    result(
      'no request got a 500',
      input.api.serverErrors.map((e) => `${new Date(e.at).toISOString()} ${e.route} ${e.status} ${e.body.slice(0, 200)}`),
    ),
  );

  const { rows: slowest } = await db.query<{ topic: string; status: string; attempts: number; seconds: number; created_at: Date; last_error: string | null }>(
    `select topic, status, attempts, extract(epoch from processed_at - created_at)::float8 as seconds, created_at, last_error
       from outbox where processed_at is not null order by processed_at - created_at desc limit 5`,
  );

  const byTopicStatus: Record<string, number> = {};
  for (const m of outbox) byTopicStatus[`${m.topic} ${m.status}`] = (byTopicStatus[`${m.topic} ${m.status}`] ?? 0) + 1;
  const dupCounts = [...accepted.values()].filter((n) => n > 1);
  return {
    checks,
    mail: {
      expected: expectedCount,
      delivered: [...accepted.keys()].filter((id) => expectedIds.has(id)).length,
      deliveries,
      duplicates: dupCounts.reduce((s, n) => s + n - 1, 0),
      duplicatedMessages: dupCounts.length,
      lost,
      unexpected: unexpectedIds.length,
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
    slowest: slowest.map((r) => ({
      topic: r.topic,
      status: r.status,
      attempts: r.attempts,
      seconds: Math.round(r.seconds * 10) / 10,
      createdAt: r.created_at.toISOString(),
      lastError: r.last_error ? r.last_error.slice(0, 300) : null,
    })),
    bookings: {
      total: bookings.length,
      confirmed: bookings.filter((b) => b.status === 'confirmed').length,
      cancelled: bookings.filter((b) => b.status === 'cancelled').length,
    },
  };
}
