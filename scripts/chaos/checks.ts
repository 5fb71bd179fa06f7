/*
 * A verdict row: one invariant of the chaos run, whether it held, and what broke it. The judge's
 * rules (rules/) make most of them; the events path (events/check.ts) and the webhooks
 * (webhooks.ts) make theirs after the drain, under the names listed here, and the judge requires
 * every one of those names in the final list (a check that was not made is broken, not skipped).
 */

/**
 * A check from its violations: held when there are none; the first ten kept for the report as
 * examples of what broke, `count` when more broke than are listed. A `note` is said beside "held"
 * in the report when the check could not fully judge (too little to judge from).
 */
export function checkResult(name: string, violations: string[], count = violations.length): CheckResult {
  return { name, ok: count === 0, violations: violations.slice(0, 10), violationCount: count };
}

export type CheckResult = { name: string; ok: boolean; violations: string[]; violationCount: number; note?: string };

/**
 * The events path's checks (events/check.ts makes them after the drain; the email pace is judged
 * by rules/email-pace.ts). When the events part ran, every one of them must be in the final list:
 * one that is missing is a broken check.
 */
export const EVENT_CHECKS = {
  caughtUp: 'events: the earnings consumer caught up with the stream after the run (consume:earnings --until-empty exit 0)',
  exactlyOnce:
    'events: every booking event of the outbox is in the JetStream stream exactly once (by Nats-Msg-Id; at most once if relayed before a stream deletion), and nothing else is but the forged events',
  ledger:
    'events: no money lost or invented: the earnings ledger per host and currency equals the bookings table (confirmed minus cancelled, in SQL)',
  deadLetters: 'events: no consumer dead letters but the forged events (every event the relay published is one the ledger can apply)',
  forgedRefused:
    'events: forged events credited nothing (each one a consumer dead letter with its refusal unless it left the stream unread, none in the inbox as applied)',
  emailPace:
    'events: emails kept their pace during each isolated NATS outage (p95 from the answer to the SMTP server ≤ max(2 × p95 of the emails answered in the 20 s beside it, that + 2 s), bookings and cancellations each)',
} as const;

/**
 * The webhooks' checks (webhooks.ts makes them after the drain). Always part of the run: every
 * one of them must be in the final list.
 */
export const WEBHOOK_CHECKS = {
  owed: 'webhooks: every booking event owed to every subscribed endpoint arrived at least once, with a valid signature',
  notOwed: 'webhooks: nothing arrived that was not owed, and every signature verified',
  settled: 'webhooks: no delivery left pending or failed',
} as const;
