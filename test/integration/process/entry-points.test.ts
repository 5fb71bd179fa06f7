import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Command } from '../../../src/process/run-main.ts';
import { ROOT, runInProcess, runScript, type ScriptRun } from '../../helpers/npm-run.ts';

/*
 * Every command behaves alike (src/process/run-main.ts): `--help` prints its usage and exits 0;
 * a bad setting is one line naming the variable, no stack trace, exit 2. The commands are read
 * from package.json, so a new script is checked without being listed here.
 *
 * An entry point run by runMain is checked in this process, through runCommand with the command
 * its module exports: runMain only hands it the process's arguments and sets the exit code, which
 * one real `npm start` process checks. The measurement scripts (bench, chaos, measure:search)
 * read their flags as they load, so each of them runs as a process of its own.
 */
const scripts = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>;
const entries = Object.entries(scripts)
  .map(([name, cmd]) => ({ name, entry: /^node --import tsx (\S+\.ts)(?: |$)/.exec(cmd)?.[1] }))
  .filter((e): e is { name: string; entry: string } => e.entry !== undefined);

/** The checks below give no flag but --help, so scripts sharing an entry (bench, bench:smoke) are checked once. */
const byEntry = new Map<string, string[]>();
for (const { name, entry } of entries) byEntry.set(entry, [...(byEntry.get(entry) ?? []), name]);

const BAD_SETTING = { ENV_FILE: '', LOG_LEVEL: 'nonsense', DATABASE_URL: 'postgres://u:p@127.0.0.1:1/none' };
const REPRESENTATIVE = 'start';

/**
 * The command an entry point hands to runMain (`runMain(startCommand, …)` or
 * `runMain(drainOutboxCommand(), …)`), taken from the module's exports; undefined for a script
 * without runMain, which runs as it loads and so must not be imported here.
 */
async function commandOf(entry: string): Promise<Command | undefined> {
  const call = /^runMain\((\w+)(\(\))?, import\.meta\.url\);$/m.exec(readFileSync(path.join(ROOT, entry), 'utf8'));
  if (!call) return undefined;
  const exported = ((await import(path.join(ROOT, entry))) as Record<string, unknown>)[call[1]!];
  if (exported === undefined) throw new Error(`${entry}: export ${call[1]} so that this test can run it`);
  return (call[2] ? (exported as () => Command)() : exported) as Command;
}

/** Runs `fn` over `items`, `limit` at a time (two cores: node start-ups at once only queue). */
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

function expectHelpAndBadSetting(name: string, help: ScriptRun, bad: ScriptRun) {
  expect(help.code, `${name} --help`).toBe(0);
  expect(help.stdout, `${name} --help`).toMatch(/^usage: npm (run |start)/);
  expect(bad.code, `${name} with LOG_LEVEL=nonsense`).toBe(2);
  const lines = bad.stderr.trim().split('\n');
  expect(lines, `${name}: ${bad.stderr}`).toHaveLength(1);
  expect(lines[0]).toMatch(/^\S+: invalid configuration: LOG_LEVEL: /);
}

describe('every command', () => {
  it('is found in package.json (the check below is not vacuous)', () => {
    expect(entries.map((e) => e.name)).toEqual(
      expect.arrayContaining(['start', 'api', 'drain-outbox', 'consume:earnings', 'migrate', 'bench', 'chaos']),
    );
  });

  it('--help prints its usage and exits 0; LOG_LEVEL=nonsense is one line naming LOG_LEVEL and exit 2', async () => {
    const processes: { name: string; entry: string }[] = [];
    let commands = 0;
    for (const [entry, names] of byEntry) {
      const name = names.join(', ');
      const command = await commandOf(entry);
      if (!command) {
        processes.push({ name, entry });
        continue;
      }
      commands++;
      const help = await runInProcess(command, ['--help'], { ...process.env, ENV_FILE: '' });
      const bad = await runInProcess(command, [], { ...process.env, ...BAD_SETTING });
      expectHelpAndBadSetting(name, help, bad);
      if (names.includes(REPRESENTATIVE)) processes.push({ name, entry });
    }
    expect(commands, 'entry points checked in-process').toBeGreaterThan(processes.length);
    expect(processes.map((p) => p.name)).toContain(REPRESENTATIVE);

    const results = await pool(processes, 3, async ({ name, entry }) => ({
      name,
      help: await runScript(entry, ['--help'], { ...process.env, ENV_FILE: '' }),
      bad: await runScript(entry, [], { ...process.env, ...BAD_SETTING }),
    }));
    for (const { name, help, bad } of results) expectHelpAndBadSetting(name, help, bad);
  }, 120_000);
});
