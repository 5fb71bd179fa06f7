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
 * The application's rules about failures, given to the worker (WorkerOptions.failureRules): the
 * outbox knows no mail server and no schema library, so what makes a failure permanent beyond
 * PermanentError, and what must not be kept from an error's text, are the application's to say.
 */
export interface FailureRules {
  /**
   * True for a failure no retry can fix, besides PermanentError (always permanent): DEAD at once.
   * Everything else is transient and retried with backoff. Default: nothing more.
   */
  isPermanent(err: unknown): boolean;
  /** Rewrites an error's text before it is kept (last_error, outcome events, logs). Default: as is. */
  redact(text: string): string;
  /** The error name a payload that fails its topic's schema is reported under. Default: InvalidPayload. */
  payloadErrorName: string;
}

/** The outbox's own rules: only PermanentError is permanent, nothing is redacted. */
export const NEUTRAL_FAILURE_RULES: FailureRules = Object.freeze({
  isPermanent: () => false,
  redact: (text: string) => text,
  payloadErrorName: 'InvalidPayload',
});

/**
 * Which failures are worth retrying. Permanent (DEAD at once): PermanentError (above), thrown by a
 * handler that knows no retry can help, and whatever the application's rules call permanent.
 * Everything else is transient and retried with backoff: timeouts, refused or dropped
 * connections, database blips, and any bug, which a deploy may fix before the attempts run out.
 * (A payload that fails its topic's schema is also permanent; dispatch checks that before any
 * handler runs.)
 */
export function isPermanent(err: unknown, rules: FailureRules = NEUTRAL_FAILURE_RULES): boolean {
  return err instanceof PermanentError || rules.isPermanent(err);
}

/** "handler: Error(ECONNECTION): connection closed" for last_error and logs, after the rules' redaction. */
export function describeFailure(handler: string, err: unknown, rules: FailureRules = NEUTRAL_FAILURE_RULES): string {
  const e = err instanceof Error ? err : new Error(String(err));
  // A plain Error with a string code (ETIMEDOUT, ECONNECTION, EENVELOPE): keep the code.
  const code = (e as Error & { code?: unknown }).code;
  const name = e.name === 'Error' && typeof code === 'string' ? `Error(${code})` : e.name;
  const text = `${handler}: ${name}: ${e.message}`.replace(/\s+/g, ' ').trim();
  return rules.redact(text).slice(0, 2000);
}
