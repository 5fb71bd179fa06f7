import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
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

/**
 * A measurement module that is also a command of its own (`node --import tsx scripts/bench/<it>.ts
 * --database-url URL …`, on a migrated database): when the module at `moduleUrl` is the process's
 * entry point, `measure` runs with the `--name value` flags and the database URL (the flag, or
 * DATABASE_URL), and its result is printed as JSON; imported by the bench, nothing happens.
 */
export function runIfEntry(
  moduleUrl: string,
  opts: { command: string; usage: string; indent?: number },
  measure: (databaseUrl: string, flag: (name: string) => string | undefined) => Promise<unknown>,
): void {
  try {
    if (!process.argv[1] || moduleUrl !== pathToFileURL(realpathSync(process.argv[1])).href) return;
  } catch {
    return;
  }
  const flag = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const databaseUrl = flag('database-url') ?? process.env.DATABASE_URL;
  if (!databaseUrl) {
    process.stderr.write(`${opts.usage}\n`);
    process.exit(2);
  }
  measure(databaseUrl, flag).then(
    (r) => process.stdout.write(`${JSON.stringify(r, null, opts.indent)}\n`),
    (err) => {
      process.stderr.write(`${opts.command}: ${(err as Error).stack}\n`);
      process.exitCode = 1;
    },
  );
}
