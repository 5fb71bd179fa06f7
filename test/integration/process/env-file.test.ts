import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { applyEnvFile } from '../../../src/env-file.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';

/*
 * `.env` in the working directory fills in what the real environment does not set; the real
 * environment wins. Checked in child processes started in a temporary folder, as a person's
 * shell would start them, so nothing of the test runner's own environment leaks in.
 */

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../../..');
// Absolute, because the child's working directory is not the project (tsx is not found from there).
const tsx = pathToFileURL(path.join(root, 'node_modules/tsx/dist/loader.mjs')).href;
const dirs: string[] = [];
let db: TestDatabase | undefined;
afterAll(async () => {
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  await db?.drop();
});

function folderWithEnv(content: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-env-'));
  dirs.push(dir);
  writeFileSync(path.join(dir, '.env'), content);
  return dir;
}

/** A bare environment: only what a process needs to start, plus `extra`. */
const bareEnv = (extra: Record<string, string> = {}) => ({ PATH: process.env.PATH ?? '', HOME: os.tmpdir(), ...extra });

async function configIn(cwd: string, env: Record<string, string>) {
  const script = `import { loadConfig } from ${JSON.stringify(pathToFileURL(path.join(root, 'src/config.ts')).href)};
    process.stdout.write(JSON.stringify(loadConfig()));`;
  const { stdout } = await run(process.execPath, ['--import', tsx, '--input-type=module', '-e', script], { cwd, env });
  return JSON.parse(stdout) as Record<string, unknown>;
}

const ENV_FILE_TEXT = [
  '# a comment',
  'PORT=4321',
  'LOG_LEVEL=debug',
  'MAIL_FROM="Demo Stays <demo@stayhub.test>"',
  'SERVICE_FEE_PERCENT=5',
  '',
].join('\n');

describe('.env', () => {
  it('fills in what the environment does not set; a real variable wins over the file', async () => {
    const dir = folderWithEnv(ENV_FILE_TEXT);
    const c = await configIn(dir, bareEnv({ PORT: '5555' }));
    expect(c.PORT).toBe(5555); // the real environment
    expect(c.LOG_LEVEL).toBe('debug'); // the file
    expect(c.MAIL_FROM).toBe('Demo Stays <demo@stayhub.test>');
    expect(c.SERVICE_FEE_PERCENT).toBe(5);
  });

  it('is optional, and ENV_FILE= (empty) reads none', async () => {
    const none = mkdtempSync(path.join(os.tmpdir(), 'stayhub-env-'));
    dirs.push(none);
    expect((await configIn(none, bareEnv())).PORT).toBe(3000);
    const dir = folderWithEnv(ENV_FILE_TEXT);
    expect((await configIn(dir, bareEnv({ ENV_FILE: '' }))).PORT).toBe(3000);
  });

  it('reaches a real script: outbox:stats reads DATABASE_URL from .env, and the environment overrides it', async () => {
    db = await createTestDatabase();
    const dir = folderWithEnv(`DATABASE_URL=${db.url}\n`);
    const entry = path.join(root, 'src/commands/outbox-stats.ts');
    const ok = await run(process.execPath, ['--import', tsx, entry], { cwd: dir, env: bareEnv() });
    expect(ok.stdout).toContain('TOTAL');
    // Port 1: nothing listens there. The environment's value is the one used, so the script fails.
    const overridden = await run(process.execPath, ['--import', tsx, entry], {
      cwd: dir,
      env: bareEnv({ DATABASE_URL: 'postgres://nobody:x@127.0.0.1:1/none' }),
    }).then(
      (r) => ({ code: 0, stdout: r.stdout }),
      (e: { code: number; stdout: string }) => e,
    );
    expect(overridden.code).toBe(1);
    expect(overridden.stdout).not.toContain('TOTAL');
  });

  it('reads what a person meant: text after a closing quote, a first key behind a byte order mark', async () => {
    const dir = folderWithEnv(
      '\uFEFFDATABASE_URL=postgres://stayhub:pa%23ss@db.example:5432/stayhub\n' + 'MAIL_FROM="Stay Hub" <no-reply@stayhub.test>\n',
    );
    const c = await configIn(dir, bareEnv());
    expect(c.DATABASE_URL).toBe('postgres://stayhub:pa%23ss@db.example:5432/stayhub');
    expect(c.MAIL_FROM).toBe('"Stay Hub" <no-reply@stayhub.test>');
  });

  it('says in one line what to do with a # inside a URL, naming the variable', async () => {
    const dir = folderWithEnv('DATABASE_URL=postgres://stayhub:pa#ss@db.example:5432/stayhub\n');
    const failed = await configIn(dir, bareEnv()).then(
      () => ({ stderr: '' }),
      (e: { stderr: string }) => e,
    );
    expect(failed.stderr).toContain('.env: DATABASE_URL: a # inside a URL ends the URL there; write a # of a password or path as %23\n');
    const warned: string[] = [];
    const env: NodeJS.ProcessEnv = {};
    const result = applyEnvFile(env, dir, (l) => warned.push(l));
    expect(env.DATABASE_URL).toBe('postgres://stayhub:pa#ss@db.example:5432/stayhub');
    expect(result?.reinterpreted).toEqual(['DATABASE_URL']);
    expect(warned).toEqual([expect.stringMatching(/^\.env: DATABASE_URL: .*%23$/)]);
    // The environment's own value wins, and nothing is said about the file's.
    expect(applyEnvFile({ DATABASE_URL: 'postgres://db/x' }, dir, (l) => warned.push(l))?.warnings).toEqual([]);
  });

  it('warns of a key in the file that nothing reads, with the setting it resembles; not of the environment', async () => {
    const dir = folderWithEnv('PROT=4000\nWORKER_CONCURENCY=4\nNATS_API_PASSWORD=x\nLOG_LEVEL=warn\nFAVOURITE_COLOUR=blue\n');
    const script = `await import(${JSON.stringify(pathToFileURL(path.join(root, 'src/config.ts')).href)});`;
    const { stderr } = await run(process.execPath, ['--import', tsx, '--input-type=module', '-e', script], {
      cwd: dir,
      env: bareEnv({ SOME_SHELL_VARIABLE: '1', PROT: 'set in the shell too' }),
    });
    expect(stderr.split('\n').filter(Boolean).sort()).toEqual([
      '.env: FAVOURITE_COLOUR is not a setting StayHub reads (.env.example lists them): ignored',
      '.env: PROT is not a setting StayHub reads: did you mean PORT? (ignored)',
      '.env: WORKER_CONCURENCY is not a setting StayHub reads: did you mean WORKER_CONCURRENCY? (ignored)',
    ]);
  });

  it('applyEnvFile: sets only missing keys, reports them, keeps an empty real value', () => {
    const dir = folderWithEnv('A=from-file\nB=from-file\nC=from-file\n');
    const env: NodeJS.ProcessEnv = { A: 'real', C: '' };
    const result = applyEnvFile(env, dir);
    expect(env).toEqual({ A: 'real', B: 'from-file', C: '' });
    expect(result?.applied).toEqual(['B']);
    expect(() => applyEnvFile({ ENV_FILE: 'missing.env' }, dir)).toThrow(/ENV_FILE=missing\.env/);
  });
});
