import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseEnv } from 'node:util';

/**
 * `cp .env.example .env`, edit, restart: the file fills in every variable the real environment
 * does not set. The real environment always wins (a variable set in the shell, by docker-compose
 * or by a supervisor is never overridden by a file someone left in the folder), the same rule as
 * dotenv's and Node's `--env-file`.
 *
 * Parsed with `util.parseEnv` (Node ≥ 20.12, no dependency) and applied key by key, rather than
 * `process.loadEnvFile`, so the precedence is ours and written here, not a Node version's detail.
 *
 * `ENV_FILE` names another file (relative to the working directory); `ENV_FILE=` (empty) reads
 * none, e.g. for a test suite that must not see a developer's `.env`.
 */
export interface EnvFileResult {
  file: string;
  /** Keys taken from the file (those the environment did not already set). */
  applied: string[];
}

export function applyEnvFile(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): EnvFileResult | undefined {
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
  for (const [key, value] of Object.entries(parseEnv(text))) {
    if (env[key] === undefined && value !== undefined) {
      env[key] = value;
      applied.push(key);
    }
  }
  return { file, applied };
}
