import { backoffDelaySeconds } from '../../src/outbox/index.ts';

/*
 * The chaos run's fixed settings: what the workers are started with, who the mail is from, how
 * often the SMTP server refuses for a while.
 */

// Worker settings that make retries fit in a short run. The retry window (retryWindowMs) must be
// longer than any SMTP outage the schedule draws. MAX_ATTEMPTS goes past the window's attempts:
// attempts are counted at claim, so every worker kill and terminated connection costs the messages
// in hand one, and the faults an isolated NATS outage's quiet holds back come after it on top of
// those due then. Seed 11 (600 s) had 16 worker kills, 8 terminations and 2 SMTP outages in the
// 63 s after a quiet; two messages claimed through them spent 12 attempts and went DEAD.
export const WORKER_ENV = {
  LEASE_SECONDS: '5',
  BACKOFF_BASE_SECONDS: '0.2',
  BACKOFF_MAX_SECONDS: '2',
  MAX_ATTEMPTS: '20',
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

/** The attempts the outages are sized for (the rest of MAX_ATTEMPTS is for the faults bunched after a quiet). */
const OUTAGE_ATTEMPTS = 12;

/**
 * Smallest total of backoff delays over OUTAGE_ATTEMPTS attempts (jitter can only shorten a delay by
 * half), 8.5 s: SMTP and NATS outages are drawn no longer than half of it, and kept that far apart.
 */
export function retryWindowMs(): number {
  const base = Number(WORKER_ENV.BACKOFF_BASE_SECONDS);
  const max = Number(WORKER_ENV.BACKOFF_MAX_SECONDS);
  let total = 0;
  for (let n = 1; n < OUTAGE_ATTEMPTS; n++) total += backoffDelaySeconds(n, { baseSeconds: base, maxSeconds: max }) / 2;
  return total * 1000;
}
