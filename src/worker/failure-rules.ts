import type { FailureRules } from '../outbox/index.ts';

/*
 * This application's rules about handler failures, given to the outbox worker
 * (src/worker/outbox-worker.ts): the outbox itself knows no mail server and no schema library.
 */

/**
 * Permanent beyond PermanentError (DEAD at once): an SMTP reply 5xx (nodemailer sets
 * `responseCode`), the server refusing for good (unknown mailbox, message rejected). SMTP 4xx
 * (greylisting, mailbox busy), timeouts (ETIMEDOUT) and refused or dropped connections
 * (ECONNECTION, ECONNREFUSED) stay transient and are retried.
 */
export function isSmtpRefusal(err: unknown): boolean {
  const code = (err as { responseCode?: unknown } | null)?.responseCode;
  return typeof code === 'number' && code >= 500 && code < 600;
}

const EMAIL = /[^\s<>()"',;:@]+@[^\s<>()"',;:@]+\.[A-Za-z]{2,}/g;

/** Replaces anything shaped like an email address: SMTP errors quote the recipient. */
export function redactEmails(s: string): string {
  return s.replace(EMAIL, '[email]');
}

export const FAILURE_RULES: FailureRules = Object.freeze({
  isPermanent: isSmtpRefusal,
  redact: redactEmails,
  // The payload schemas (src/messages/topics.ts) are zod's.
  payloadErrorName: 'ZodError',
});
