import { retryDelaySeconds, type BackoffOptions } from '../backoff.ts';
import type { HandlerFailure, Verdict } from '../types.ts';
import { describeFailure, isPermanent, isPostponement, NEUTRAL_FAILURE_RULES, type FailureRules } from './failures.ts';

/*
 * What happens to a message, decided from what its handlers did: the one place where the worker's
 * rules live. Pure: no database, no clock, no logger (the jitter's random source comes in with
 * `backoff`), so it is tested on its own (test/unit/outbox/verdict.test.ts). Recording a verdict is
 * src/outbox/settle.ts's job.
 */

/** DONE with nothing left to run: every handler had succeeded on an earlier attempt. */
export const ALREADY_DONE: Verdict = Object.freeze({ kind: 'done', handler: null, durationMs: 0 });
const UNKNOWN_TOPIC: Verdict = Object.freeze({ kind: 'unknown_topic' });
const NONE: readonly string[] = Object.freeze([]);

/**
 * Before any handler runs. Null: run the handlers.
 * - no handler for the topic → unknown_topic (never dead: usually a consumer not deployed yet);
 * - claimed more than maxAttempts times → dead: attempts are counted at claim, so more claims than
 *   attempts means earlier claims ended without an outcome (the worker died, every time);
 * - a payload that does not match its topic's schema → dead: no retry fixes it.
 */
export function verdictBeforeRun(facts: {
  handlerCount: number;
  attempts: number;
  maxAttempts: number;
  payloadError: string | null;
}): Verdict | null {
  if (facts.handlerCount === 0) return UNKNOWN_TOPIC;
  if (facts.attempts > facts.maxAttempts) {
    const error = `worker: NoOutcome: claimed ${facts.attempts - 1} times without an outcome (did the worker crash each time?)`;
    return { kind: 'dead', error, succeeded: NONE, failures: [] };
  }
  if (facts.payloadError !== null) return { kind: 'dead', error: facts.payloadError, succeeded: NONE, failures: [] };
  return null;
}

/**
 * How long a postponed message waits: what the handler asked for (how long its downstream has
 * been away; the first backoff step when it did not say), capped by the backoff's maximum, with
 * the same equal jitter as a retry. The attempts do not grow, so the wait cannot come from them;
 * the cap bounds how late a message learns that the downstream is back.
 */
export function postponeDelaySeconds(requested: number | undefined, o: BackoffOptions): number {
  const delay = Math.min(Math.max(requested ?? o.baseSeconds, 0), o.maxSeconds);
  if (!o.jitter) return delay;
  const r = (o.random ?? Math.random)();
  return delay / 2 + r * (delay / 2);
}

/** The wait a failure asks for when it postpones (the longest, if several handlers postpone). */
export function requestedWait(errors: readonly unknown[]): number | undefined {
  let wait: number | undefined;
  for (const e of errors) {
    const s = isPostponement(e) ? e.retryAfterSeconds : undefined;
    if (s !== undefined && (wait === undefined || s > wait)) wait = s;
  }
  return wait;
}

/**
 * After this attempt's handlers ran (all of them, even after one failed: the guest's email should
 * not wait for the host's mail server). DONE if none failed; POSTPONE if every failure was a
 * downstream being unavailable (no attempt spent, never DEAD); otherwise the other failures
 * decide: DEAD if every one of them was permanent or this was the last attempt, else retry after
 * the capped exponential backoff (with jitter). Every, not any: a 550 for the guest must not stop
 * the retry of the host's 451 (found by the chaos run, where it lost host emails). A postponing
 * handler beside a failing one shares the message's fate: the attempt counts, as it is the other
 * handler's.
 */
export function verdictAfterRun(facts: {
  attempts: number;
  maxAttempts: number;
  /** The handlers this attempt ran, in order. */
  ran: readonly string[];
  failures: readonly HandlerFailure[];
  backoff: BackoffOptions;
  /** The application's failure rules (WorkerOptions.failureRules); the neutral ones when not given. */
  rules?: FailureRules;
}): Verdict {
  if (facts.failures.length === 0) return ALREADY_DONE;
  const rules = facts.rules ?? NEUTRAL_FAILURE_RULES;
  const failed = new Set(facts.failures.map((f) => f.handler));
  const succeeded = facts.ran.filter((h) => !failed.has(h));
  const failures = facts.failures.map((f) => ({
    handler: f.handler,
    error: describeFailure(f.handler, f.error, rules),
    durationMs: f.durationMs,
  }));
  const error = failures
    .map((f) => f.error)
    .join(' | ')
    .slice(0, 4000);
  const own = facts.failures.filter((f) => !isPostponement(f.error));
  if (own.length === 0) {
    const delaySeconds = postponeDelaySeconds(requestedWait(facts.failures.map((f) => f.error)), facts.backoff);
    return { kind: 'postpone', delaySeconds, error, succeeded, failures };
  }
  const permanent = own.every((f) => isPermanent(f.error, rules));
  if (permanent || facts.attempts >= facts.maxAttempts) return { kind: 'dead', error, succeeded, failures };
  return { kind: 'retry', delaySeconds: retryDelaySeconds(facts.attempts, facts.backoff), error, succeeded, failures };
}
