/**
 * Thrown by a handler for a failure no retry can fix: the message goes DEAD at once, its other
 * attempts unspent. (The application re-exports it from src/errors.ts.)
 */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/**
 * Thrown by a handler whose downstream is unavailable (a broker known to be down or hung): not
 * this message's fault, and no attempt should be spent on it. The message waits (PENDING, its
 * `attempts` as before, `last_error` = this message) and is tried again after `retryAfterSeconds`,
 * capped by BACKOFF_MAX_SECONDS; it never goes DEAD for it. A handler throws it only when it knows
 * the downstream is away, not on a failure that might be the message's own: that one is an
 * ordinary failure, which counts.
 */
export class DependencyUnavailableError extends Error {
  /** Seconds worth waiting (the handler's guess: how long the downstream has been away); the runner caps it. */
  readonly retryAfterSeconds: number | undefined;
  constructor(message: string, options?: { retryAfterSeconds?: number; cause?: unknown }) {
    super(message, { cause: options?.cause });
    this.name = 'DependencyUnavailableError';
    this.retryAfterSeconds = options?.retryAfterSeconds;
  }
}

/** A failure that postpones the message instead of spending its attempt. */
export const isPostponement = (err: unknown): err is DependencyUnavailableError => err instanceof DependencyUnavailableError;

/**
 * Which failures are worth retrying. Permanent (DEAD at once):
 * - PermanentError (above), thrown by a handler that knows no retry can help;
 * - an SMTP reply 5xx (nodemailer sets `responseCode`): the server refused for good (unknown
 *   mailbox, message rejected).
 * Everything else is transient and retried with backoff: SMTP 4xx (greylisting, mailbox busy),
 * timeouts (ETIMEDOUT), refused or dropped connections (ECONNECTION, ECONNREFUSED), database
 * blips, and any bug, which a deploy may fix before the attempts run out.
 * (A payload that fails its topic's schema is also permanent; dispatch checks that before any
 * handler runs.)
 */
export function isPermanent(err: unknown): boolean {
  if (err instanceof PermanentError) return true;
  const code = (err as { responseCode?: unknown } | null)?.responseCode;
  return typeof code === 'number' && code >= 500 && code < 600;
}

const EMAIL = /[^\s<>()"',;:@]+@[^\s<>()"',;:@]+\.[A-Za-z]{2,}/g;

/** Replaces anything shaped like an email address: SMTP errors quote the recipient. */
export function redactEmails(s: string): string {
  return s.replace(EMAIL, '[email]');
}

/** "email.host-notice: Error: Can't send mail - all recipients were rejected: 550 …" for last_error and logs. */
export function describeFailure(handler: string, err: unknown): string {
  const e = err instanceof Error ? err : new Error(String(err));
  // nodemailer's errors are plain Errors with a code (ETIMEDOUT, ECONNECTION, EENVELOPE): keep it.
  const code = (e as Error & { code?: unknown }).code;
  const name = e.name === 'Error' && typeof code === 'string' ? `Error(${code})` : e.name;
  const text = `${handler}: ${name}: ${e.message}`.replace(/\s+/g, ' ').trim();
  return redactEmails(text).slice(0, 2000);
}
