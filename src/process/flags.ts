import { UsageError } from './run-main.ts';

/*
 * Numbers on a command line. `Number()` alone takes "", " 5", "1e3", "0x10" and "-0", and takes
 * any size: `outbox:purge --days 99999999` reached a date out of range and ended on a raw
 * "Invalid time value", exit 1. Every command's numeric flag goes through here, so a bad one is a
 * usage error (exit 2) that names the flag and the range it takes.
 */

export interface Range {
  min: number;
  max: number;
}

/** The whole number `value` of flag `--name`, within `range`; otherwise a UsageError saying so. */
export function wholeNumberFlag(name: string, value: string, range: Range): number {
  const n = /^\d{1,15}$/.test(value) ? Number(value) : NaN;
  if (!(n >= range.min && n <= range.max)) {
    throw new UsageError(`--${name} must be a whole number from ${range.min} to ${range.max} (got "${value}")`);
  }
  return n;
}

/** As wholeNumberFlag, for a flag that may be absent (undefined then). */
export function optionalWholeNumberFlag(name: string, value: string | boolean | undefined, range: Range): number | undefined {
  return value === undefined ? undefined : wholeNumberFlag(name, String(value), range);
}
