import type { AttemptResult } from './send.ts';

/** What an attempt's result means for its delivery. */
export type AttemptVerdict =
  | { kind: 'succeeded' }
  | { kind: 'retry'; delaySeconds: number }
  /** The last attempt of the round failed: the delivery is kept as failed, and can be retried by hand. */
  | { kind: 'failed' }
  /** 410 Gone: the receiver says the endpoint no longer exists. Failed, and the endpoint is disabled. */
  | { kind: 'gone' };

/**
 * 2xx is success; 410 ends it; anything else (another status, a timeout, no connection) is tried
 * again after the schedule's next delay (±10 % jitter, so endpoints that failed together do not
 * come back together). A 429 or 503 with Retry-After waits at least that long, capped at the
 * schedule's longest delay so a receiver cannot park a delivery for a year.
 */
export function judge(
  result: AttemptResult,
  attempt: number,
  schedule: readonly number[],
  random: () => number = Math.random,
): AttemptVerdict {
  if (result.status !== null && result.status >= 200 && result.status < 300) return { kind: 'succeeded' };
  if (result.status === 410) return { kind: 'gone' };
  if (attempt > schedule.length) return { kind: 'failed' };
  const scheduled = schedule[attempt - 1]! * (0.9 + 0.2 * random());
  const asked = result.retryAfterSeconds === null ? 0 : Math.min(result.retryAfterSeconds, Math.max(...schedule));
  return { kind: 'retry', delaySeconds: Math.max(scheduled, asked) };
}
