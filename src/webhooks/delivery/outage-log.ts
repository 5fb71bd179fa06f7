import { isDatabaseUnavailable } from '../../db/pg-errors.ts';
import type { Logger } from '../../logger.ts';

/** While the database stays unreachable, one reminder this often (the sender retries every poll meanwhile). */
const OUTAGE_REMINDER_MS = 60_000;

/** An error's code and first line: enough to tell a refused connection from a shutdown, without its stack. */
function reasonOf(err: unknown): string {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === 'string' || typeof message === 'string') {
      const first = typeof message === 'string' ? message.split('\n')[0]! : '';
      return typeof code === 'string' ? `${code}: ${first}` : first;
    }
  }
  return String(err);
}

/*
 * The webhook sender's log while the database is down. The claim loop retries every poll interval,
 * and each retry used to log its error with a stack trace: 698 lines in 30 s, burying whatever else
 * the worker said. Now an outage is three kinds of line: one when it starts (the first failure that
 * says the database is unavailable: refused, reset, shut down, no connection in time), one every
 * OUTAGE_REMINDER_MS while it lasts, and one when a statement succeeds again, with how long it
 * lasted and how many statements failed meanwhile. Any other error (a bug, not an outage) is still
 * logged in full, each time.
 */
export class OutageLog {
  private since: number | undefined;
  private failures = 0;
  private lastLine = 0;

  constructor(
    private readonly log: Logger,
    private readonly reminderMs = OUTAGE_REMINDER_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** True while an outage is being counted. */
  get down(): boolean {
    return this.since !== undefined;
  }

  /**
   * A statement of the sender failed (`what`: what it was doing, `message`: the line for an error
   * that is not an outage). Returns true when the failure was an outage's and was counted.
   */
  failed(err: unknown, what: string, message: string, fields: Record<string, unknown> = {}): boolean {
    if (!isDatabaseUnavailable(err)) {
      this.log.error({ err, ...fields }, message);
      return false;
    }
    const now = this.now();
    this.failures++;
    if (this.since === undefined) {
      this.since = now;
      this.lastLine = now;
      this.log.warn(
        { reason: reasonOf(err), during: what },
        'webhook sender: the database is unreachable; claims and records are retried every poll until it answers',
      );
    } else if (now - this.lastLine >= this.reminderMs) {
      this.lastLine = now;
      this.log.warn(
        { reason: reasonOf(err), failures: this.failures, downSeconds: Math.round((now - this.since) / 1000) },
        'webhook sender: the database is still unreachable',
      );
    }
    return true;
  }

  /** A statement of the sender succeeded: ends the outage being counted, if any, with its summary. */
  succeeded(): void {
    if (this.since === undefined) return;
    const downMs = this.now() - this.since;
    this.log.info(
      { downSeconds: Math.round(downMs / 100) / 10, failures: this.failures },
      'webhook sender: the database answers again; what waited is sent',
    );
    this.since = undefined;
    this.failures = 0;
  }
}
