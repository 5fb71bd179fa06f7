import { z } from 'zod';
import { parseNatsServers } from './events/nats-url.ts';

/*
 * The kinds of value src/config.ts's settings are made of, and how the environment is read before
 * they parse it.
 */

export const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off']).transform((v) => ['true', '1', 'yes', 'on'].includes(v));

/**
 * A century: older than any row can be. Beyond some millions of days the cut-off is a date out of
 * range ("Invalid time value"), so OUTBOX_RETENTION_DAYS and `outbox:purge --days` stop here.
 */
export const MAX_RETENTION_DAYS = 36_500;

export const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

/*
 * Bounds. Every duration has a ceiling well below what Node's timers take: a delay above 2^31-1 ms
 * (24.8 days) is not an error there but a 1 ms timer, so an interval set too long would run
 * continuously. Other ceilings are where a value stops making sense (a session of a year).
 */
export const MINUTE = 60;
export const HOUR = 3600;
export const DAY = 86_400;
/** A year of hours: the longest a session, a secret overlap or a disabling delay may be. */
export const YEAR_HOURS = 365 * 24;
/** The longest timeout of a single wait (a request, a statement, a publish): 10 minutes. */
export const WAIT_MAX_MS = 600_000;

/**
 * Days a finished row is kept. 0 is refused, not read as "keep nothing": housekeeping would drop
 * yesterday's outbox partition, messages a consumer may still be replaying, without a word.
 */
export const retentionDays = z.coerce
  .number()
  .int()
  .min(1, "must be at least 1 day (0 would delete yesterday's rows at the next housekeeping)")
  .max(MAX_RETENTION_DAYS);

export const optionalUrl = z
  .string()
  .trim()
  .transform((v) => (v === '' ? undefined : v))
  .pipe(z.string().url().optional());

/**
 * NATS_URL: one server or a cluster's, comma-separated, each nats:// or tls:// (src/events/nats-url.ts).
 * Kept as written (the client reads it through the same parser); an issue never repeats the value,
 * which may hold a password.
 */
export const natsUrl = z
  .string()
  .trim()
  .transform((v) => (v === '' ? undefined : v))
  .superRefine((v, ctx) => {
    if (v === undefined) return;
    try {
      parseNatsServers(v);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
    }
  });

/**
 * `NAME=` (or blanks) is read as unset, so it gets the default. Left in, an empty value is coerced
 * to 0 (`PORT=` listened on a random port, `SERVICE_FEE_PERCENT=` charged no fee) or to an empty
 * name, and a line a person meant to fill in later silently changes behaviour.
 */
export function withoutEmptyValues(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([, v]) => v === undefined || v.trim() !== ''));
}
