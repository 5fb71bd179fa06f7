import { parseArgs } from 'node:util';

/*
 * The command line of the measurement scripts (bench, chaos, measure-search): `--help` / `-h`
 * prints the usage on stdout and exits 0; a flag the script does not know, a flag without its
 * value or a stray argument prints one line naming it, then the usage, on stderr and exits 2.
 * A mistyped flag is a person's mistake: it gets a sentence, never a stack trace.
 */

type FlagSpec = { type: 'string' | 'boolean'; short?: string; default?: string | boolean };

/** What parseArgs gives for `O`: a string or a boolean per flag, `undefined` when absent without a default. */
export type FlagValues<O extends Record<string, FlagSpec>> = {
  [K in keyof O]: (O[K]['type'] extends 'string' ? string : boolean) | (O[K] extends { default: unknown } ? never : undefined);
};

/** Prints `message` and the usage on stderr and exits 2. */
export function usageError(command: string, usage: string, message: string): never {
  process.stderr.write(`${command}: ${message}\n\n${usage.trimEnd()}\n`);
  process.exit(2);
}

/** One line for parseArgs' errors, which otherwise carry advice on positionals after `--`. */
function describe(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const unknown = /^Unknown option '([^']+)'/.exec(message);
  if (unknown) return `unknown flag ${unknown[1]}`;
  const positional = /^Unexpected argument '([^']*)'/.exec(message);
  if (positional) return `unexpected argument '${positional[1]}' (this command takes flags only)`;
  return message.split('\n')[0]!;
}

/**
 * Parses `argv` against `options` plus `--help`. Returns the values, or exits (0 after printing
 * the usage for --help, 2 after a usage error).
 */
export function parseFlags<O extends Record<string, FlagSpec>>(
  command: string,
  usage: string,
  options: O,
  argv: string[] = process.argv.slice(2),
): FlagValues<O> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: false }));
  } catch (err) {
    usageError(command, usage, describe(err));
  }
  if (values.help) {
    process.stdout.write(`${usage.trimEnd()}\n`);
    process.exit(0);
  }
  return values as FlagValues<O>;
}

/** A whole number ≥ `min` from flag `name`, or a usage error. */
export function wholeNumber(command: string, usage: string, name: string, value: string, min: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < min) usageError(command, usage, `--${name} must be a whole number ≥ ${min} (got "${value}")`);
  return n;
}
