import { backoffDelaySeconds } from '../../src/outbox/index.ts';

/*
 * The chaos run's fixed settings: what the workers are started with, who the mail is from, how
 * often the SMTP server refuses for a while.
 */

// Worker settings that make retries fit in a short run. The retry window (sum of the backoff
// delays before a message dies) must be longer than any SMTP outage the schedule draws.
export const WORKER_ENV = {
  LEASE_SECONDS: '5',
  BACKOFF_BASE_SECONDS: '0.2',
  BACKOFF_MAX_SECONDS: '2',
  MAX_ATTEMPTS: '12',
  POLL_INTERVAL_MS: '250',
  SMTP_TIMEOUT_MS: '3000',
  SHUTDOWN_TIMEOUT_SECONDS: '5',
  // The relay's publish gives up well inside the lease: with NATS down, an attempt fails in 1 s
  // and backs off, instead of holding its claim until the lease runs out.
  EVENTS_PUBLISH_TIMEOUT_MS: '1000',
};
export const MAIL_FROM = 'StayHub <no-reply@stayhub.test>';
/** The right-hand side of every Message-ID the workers send (the domain of MAIL_FROM). */
export const MAIL_DOMAIN = 'stayhub.test';
/** The share of deliveries the SMTP server refuses with a 451 (try again later). */
export const TEMP_FAIL_RATE = 0.1;

/** Smallest total of backoff delays before a message dies (jitter can only shorten a delay by half). */
export function retryWindowMs(): number {
  const base = Number(WORKER_ENV.BACKOFF_BASE_SECONDS);
  const max = Number(WORKER_ENV.BACKOFF_MAX_SECONDS);
  let total = 0;
  for (let n = 1; n < Number(WORKER_ENV.MAX_ATTEMPTS); n++) total += backoffDelaySeconds(n, { baseSeconds: base, maxSeconds: max }) / 2;
  return total * 1000;
}
