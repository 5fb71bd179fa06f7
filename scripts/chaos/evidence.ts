import type { MessageAsWritten } from '../../src/outbox/index.ts';
import type { CheckResult } from './checks.ts';
import type { FaultKind, FaultOutcome } from './fault-kinds.ts';
import type { SinkRecord } from './smtp-sink.ts';

/*
 * What the chaos run gathers for its judge (gather.ts, the SMTP server's record, the clients'
 * notes, the fault log, the supervisor's exit log), as plain data: nothing here talks to a
 * process or a database, so every way the run could be fooled can be fed to the judge in a unit
 * test (test/unit/harness/chaos-verdict.test.ts, test/unit/harness/chaos-judge-golden.test.ts).
 *
 * Three sources, none of them the system's own account of itself:
 * - the database says which bookings exist, whose they are (guest and host addresses, joined
 *   from `users`, not read from the event payload) and what the outbox ended as;
 * - the clients say what they were told (every 201, every cancellation answered 200);
 * - the SMTP server says what it accepted, with the Message-ID it parsed and the envelope
 *   recipients (RCPT TO) it accepted it for.
 * When the events path runs, a fourth: the JetStream stream and the earnings ledger, read after
 * the drain by events/check.ts, whose checks join the list (EVENT_CHECKS).
 */

export interface BookingRow {
  publicId: string;
  status: 'confirmed' | 'cancelled';
  /** From `users` joined on the booking's guest and the property's host: not from any payload. */
  guestEmail: string;
  hostEmail: string;
}

/** A message as written (src/outbox/as-written.ts), the fields the judge reads. */
export type OutboxRow = Omit<MessageAsWritten, 'laneOpen' | 'createdMs'>;

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
   * The events path (events/check.ts): its checks, made after the drain. Null: that part did not
   * run (nats-server missing outside CI), so neither its checks nor its faults are required.
   */
  events: { checks: CheckResult[] } | null;
  /** The webhooks' checks (webhooks.ts), made after the drain. */
  webhooks: { checks: CheckResult[] };
}

/** Addresses compare without case. */
export const lc = (s: string) => s.toLowerCase();
