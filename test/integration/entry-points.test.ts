import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/*
 * Every command behaves alike (src/process/run-main.ts): `--help` prints its usage and exits 0;
 * a bad setting is one line naming the variable, no stack trace, exit 2. The commands are read
 * from package.json, so a new script is checked without being listed here.
 */
const ROOT = new URL('../../', import.meta.url);
const scripts = JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')).scripts as Record<string, string>;
const entries = Object.entries(scripts)
  .map(([name, cmd]) => ({ name, entry: /^node --import tsx (\S+\.ts)(?: |$)/.exec(cmd)?.[1] }))
  .filter((e): e is { name: string; entry: string } => e.entry !== undefined);

function run(entry: string, args: string[], env: Record<string, string> = {}) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', entry, ...args], {
      cwd: ROOT,
      env: { ...process.env, ENV_FILE: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Runs `fn` over `items`, `limit` at a time (two cores: a dozen node start-ups at once only queue). */
async function pool<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}

describe('every command', () => {
  it('is found in package.json (the check below is not vacuous)', () => {
    expect(entries.map((e) => e.name)).toEqual(
      expect.arrayContaining(['start', 'api', 'drain-outbox', 'consume:earnings', 'migrate', 'bench', 'chaos']),
    );
  });

  it('--help prints its usage and exits 0; LOG_LEVEL=nonsense is one line naming LOG_LEVEL and exit 2', async () => {
    const results = await pool(entries, 3, async ({ name, entry }) => ({
      name,
      help: await run(entry, ['--help']),
      bad: await run(entry, [], { LOG_LEVEL: 'nonsense', DATABASE_URL: 'postgres://u:p@127.0.0.1:1/none' }),
    }));
    for (const { name, help, bad } of results) {
      expect(help.code, `${name} --help`).toBe(0);
      expect(help.stdout, `${name} --help`).toMatch(/^usage: npm (run |start)/);
      expect(bad.code, `${name} with LOG_LEVEL=nonsense`).toBe(2);
      const lines = bad.stderr.trim().split('\n');
      expect(lines, `${name}: ${bad.stderr}`).toHaveLength(1);
      expect(lines[0]).toMatch(/^\S+: invalid configuration: LOG_LEVEL: /);
    }
  }, 120_000);
});
