import { ConfigError, loadConfig } from '../../../src/config.ts';
import { wholeNumberFlag } from '../../../src/process/flags.ts';
import { lifelineEnv } from '../../../src/process/lifeline.ts';
import { parseCommandLine, UsageError } from '../../../src/process/run-main.ts';

/*
 * The command line of the measurement scripts (bench, chaos, measure-search), parsed as every
 * command's is (src/process/run-main.ts): `--help` / `-h` prints the usage on stdout and exits 0;
 * a flag the script does not know, a flag without its value or a stray argument prints one line
 * naming it, then the usage, on stderr and exits 2; a bad setting in the environment (which the
 * processes they start read) is one line and exit 2. They set up the processes they measure
 * themselves, so they take no signals, lifeline or logger from runMain.
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

/**
 * Parses `argv` against `options` (src/process/run-main.ts parses every command's flags alike).
 * Returns the values, or exits: 0 after printing the usage for --help, 2 after a usage error.
 */
export function parseFlags<O extends Record<string, FlagSpec>>(
  command: string,
  usage: string,
  options: O,
  argv: string[] = process.argv.slice(2),
): FlagValues<O> {
  const parsed = parseCommandLine({ options }, argv);
  if ('flags' in parsed) {
    // The processes these scripts start read the same environment: a bad setting stops us here, in one line.
    try {
      loadConfig(process.env);
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      process.stderr.write(`${command}: invalid configuration: ${e.problems.join('; ')}\n`);
      process.exit(2);
    }
    // Every process these scripts start inherits this environment: with it, each one stops as on
    // SIGTERM when this script goes, SIGKILLed or stopped by a time limit (src/process/lifeline.ts).
    Object.assign(process.env, lifelineEnv());
    return parsed.flags as FlagValues<O>;
  }
  if (parsed.exit === 2) usageError(command, usage, parsed.error);
  process.stdout.write(`${usage.trimEnd()}\n`);
  process.exit(0);
}

/** A whole number from `min` to `max` from flag `name` (src/process/flags.ts), or a usage error. */
export function wholeNumber(command: string, usage: string, name: string, value: string, min: number, max: number): number {
  try {
    return wholeNumberFlag(name, value, { min, max });
  } catch (e) {
    if (e instanceof UsageError) usageError(command, usage, e.message);
    throw e;
  }
}
