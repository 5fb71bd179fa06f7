/**
 * How long a message waits after its n-th failed attempt:
 *
 *   delay(n) = min(base × 2^(n−1), max)        base 2 s, max 256 s → 2, 4, 8, 16, 32, 64, 128, 256
 *
 * It grows, so a struggling provider sees exponentially less traffic from us; it is capped, so a
 * message that would succeed next time does not wait hours; MAX_ATTEMPTS makes it give up.
 *
 * Jitter, on by default, is "equal jitter": half the delay is kept, the other half is random,
 *
 *   jittered = delay/2 + random × delay/2       always within [delay/2, delay]
 *
 * Without jitter, every message that failed during the same SMTP outage retries at the same
 * instant, and the recovering server meets a thundering herd of our own making. "Full jitter"
 * (random × delay) spreads best but can retry almost at once, which defeats the point of backing
 * off after the first failure; equal jitter keeps a guaranteed minimum wait and still spreads the
 * retries over half the window. BACKOFF_JITTER=false gives the exact schedule (tests, reasoning).
 */
export interface BackoffOptions {
  baseSeconds: number;
  maxSeconds: number;
  jitter: boolean;
  /** Injected for tests; Math.random otherwise. */
  random?: () => number;
}

/** The un-jittered delay after `attempts` failed attempts (attempts ≥ 1), in seconds. */
export function backoffDelaySeconds(attempts: number, o: Pick<BackoffOptions, 'baseSeconds' | 'maxSeconds'>): number {
  const n = Math.max(1, attempts);
  return Math.min(o.baseSeconds * 2 ** (n - 1), o.maxSeconds);
}

/** The delay actually used: equal jitter when enabled. */
export function retryDelaySeconds(attempts: number, o: BackoffOptions): number {
  const delay = backoffDelaySeconds(attempts, o);
  if (!o.jitter) return delay;
  const r = (o.random ?? Math.random)();
  return delay / 2 + r * (delay / 2);
}
