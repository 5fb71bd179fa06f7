import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseEnv } from 'node:util';

/**
 * `cp .env.example .env`, edit, restart: the file fills in every variable the real environment
 * does not set. The real environment always wins (a variable set in the shell, by docker-compose
 * or by a supervisor is never overridden by a file someone left in the folder), the same rule as
 * dotenv's and Node's `--env-file`.
 *
 * Parsed with `util.parseEnv` (Node ≥ 20.12, no dependency), corrected where it reads a line
 * otherwise than a person means it (parseEnvText), and applied key by key, rather than
 * `process.loadEnvFile`, so the precedence is ours and written here, not a Node version's detail.
 *
 * `ENV_FILE` names another file (relative to the working directory); `ENV_FILE=` (empty) reads
 * none, e.g. for a test suite that must not see a developer's `.env`.
 */
export interface EnvFileResult {
  file: string;
  /** Keys taken from the file (those the environment did not already set). */
  applied: string[];
  /** Keys read as a person means them where `util.parseEnv` would read something else (parseEnvText). */
  reinterpreted: string[];
  /**
   * One line per entry of the file that cannot work as written, saying what to do (also passed to
   * `warn`): a value that cannot work, or a key nothing reads (a misspelt setting would otherwise
   * be silently ignored, its default used).
   */
  warnings: string[];
}

export interface ParsedEnv {
  values: Record<string, string>;
  /** Keys whose value differs from what `util.parseEnv` (and Node's --env-file) would give. */
  reinterpreted: string[];
}

/**
 * A `#` inside a URL ends it: what follows is the fragment, so `postgres://u:pa#ss@db/x` is not
 * the server and password meant (PostgreSQL's driver and the config's URL check both refuse it).
 * Read whole or not, the value cannot work; the fix is the person's: percent-encode it.
 */
export function envValueWarning(key: string, value: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value) && value.includes('#')) {
    return `${key}: a # inside a URL ends the URL there; write a # of a password or path as %23`;
  }
  return undefined;
}

/** Edit distance (insertions, deletions, substitutions; a swap of two letters counts 2). */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[b.length]!;
}

/**
 * A key of the file that no setting has: a typo (`PROT=4000`) leaves the setting at its default
 * with no sign of it. The closest known key within two edits, if any, is offered: `PROT` → `PORT`,
 * `WORKER_CONCURENCY` → `WORKER_CONCURRENCY`.
 */
export function unknownKeyWarning(key: string, known: ReadonlySet<string>): string | undefined {
  if (known.has(key)) return undefined;
  const upper = key.toUpperCase();
  let best: string | undefined;
  let bestDistance = 3;
  for (const k of known) {
    const d = distance(upper, k);
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best === undefined
    ? `${key} is not a setting StayHub reads (.env.example lists them): ignored`
    : `${key} is not a setting StayHub reads: did you mean ${best}? (ignored)`;
}

/** An entry on one line: KEY=VALUE, `export ` allowed in front, as util.parseEnv reads them. */
const ENTRY = /^\s*(?:export\s+)?([^\s=#][^=]*?)\s*=(.*)$/;
const QUOTES = ['"', "'", '`'];

/**
 * `util.parseEnv`, corrected where it reads a line otherwise than whoever wrote it meant:
 *
 * - a UTF-8 byte order mark (some editors on Windows write one) became part of the first key, so
 *   that variable was silently missing: it is dropped;
 * - an unquoted `#` started a comment anywhere, cutting `postgres://u:pa#ss@host/db` to
 *   `postgres://u:pa`: a `#` starts a comment only at the start of the value or after a space (as
 *   docker-compose reads env files), so a `#` inside a password or URL stays;
 * - a value that starts with a quote ended at the matching quote, so `"Stay Hub" <a@b.c>` lost the
 *   address: when text follows the closing quote (other than a ` # comment`), the value is the
 *   whole text as written; a value that both starts and ends with the quote is its inside.
 *
 * Everything else (multi-line quoted values, `\n` in double quotes, `export`) is util.parseEnv's.
 */
export function parseEnvText(text: string): ParsedEnv {
  const source = text.replace(/^\uFEFF/, '');
  const values: Record<string, string> = {};
  for (const [key, value] of Object.entries(parseEnv(source))) if (value !== undefined) values[key] = value;
  const reinterpreted = new Set<string>();
  const lines = source.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const m = ENTRY.exec(lines[i]!);
    if (!m) continue;
    const key = m[1]!;
    const raw = m[2]!.trim();
    const quote = QUOTES.find((q) => raw.startsWith(q));
    let meant: string | undefined;
    if (quote) {
      const close = raw.indexOf(quote, 1);
      if (close === -1) {
        // A quoted value over several lines: util.parseEnv's; skip to its closing quote.
        while (i + 1 < lines.length && !lines[i + 1]!.includes(quote)) i++;
        i++;
        continue;
      }
      const after = raw.slice(close + 1).trim();
      if (after !== '' && !after.startsWith('#')) {
        const whole = raw.replace(/\s+#.*$/, '');
        meant = whole.length >= 2 && whole.endsWith(quote) ? whole.slice(1, -1) : whole;
      }
    } else if (raw.includes('#')) {
      meant = raw.replace(/(^|\s+)#.*$/, '').trim();
    }
    const nodeReading = parseEnv(lines[i]!)[key];
    if (meant === undefined || meant === nodeReading) {
      // A later line for the same key wins, as in util.parseEnv.
      if (nodeReading !== undefined) values[key] = nodeReading;
      continue;
    }
    values[key] = meant;
    reinterpreted.add(key);
  }
  return { values, reinterpreted: [...reinterpreted] };
}

/**
 * Fills `env` from the file. `known`: every key something reads (the configuration's schema and
 * the few variables read beside it); a key of the file outside it is warned about, whether or not
 * the environment also sets it. Omitted, keys are not checked.
 */
export function applyEnvFile(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
  // Before the configuration, hence before any logger: straight to stderr.
  warn: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
  known?: ReadonlySet<string>,
): EnvFileResult | undefined {
  const named = env.ENV_FILE;
  if (named === '') return undefined;
  const file = path.resolve(cwd, named ?? '.env');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    // No .env is the normal case; a file named on purpose that is not there is a mistake to report.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && named === undefined) return undefined;
    throw new Error(`ENV_FILE=${named ?? '.env'}: cannot read ${file}: ${(err as Error).message}`);
  }
  const applied: string[] = [];
  const warnings: string[] = [];
  const { values, reinterpreted } = parseEnvText(text);
  for (const [key, value] of Object.entries(values)) {
    const unknown = known && unknownKeyWarning(key, known);
    if (unknown) warnings.push(`${path.basename(file)}: ${unknown}`);
    if (env[key] === undefined) {
      env[key] = value;
      applied.push(key);
      const warning = envValueWarning(key, value);
      if (warning) warnings.push(`${path.basename(file)}: ${warning}`);
    }
  }
  warnings.forEach((w) => warn(w));
  return { file, applied, reinterpreted, warnings };
}
