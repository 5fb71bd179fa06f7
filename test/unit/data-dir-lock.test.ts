import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DataDirInUseError, lockDataDir, lockFileOf } from '../../src/process/data-dir-lock.ts';

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));
function dataDir(): string {
  const d = mkdtempSync(path.join(os.tmpdir(), 'stayhub-lock-'));
  dirs.push(d);
  return path.join(d, 'pg');
}

describe('the data folder lock', () => {
  it('refuses a second holder while the first lives, naming it, and frees the folder on release', () => {
    const dir = dataDir();
    const lock = lockDataDir(dir, 'its API at http://127.0.0.1:3000');
    expect(() => lockDataDir(dir, '')).toThrow(DataDirInUseError);
    expect(() => lockDataDir(dir, '')).toThrow(`pid ${process.pid}`);
    lock.release();
    expect(existsSync(lockFileOf(dir))).toBe(false);
    lockDataDir(dir, '').release();
  });

  it('takes over a lock whose pid now belongs to another process (pid reused)', () => {
    const dir = dataDir();
    const taken: number[] = [];
    // Our own pid, but another start time: the process that wrote it is gone.
    writeFileSync(lockFileOf(dir), JSON.stringify({ pid: process.pid, startTime: '1', startedAt: 'then', cwd: '/', serves: '' }));
    const lock = lockDataDir(dir, 'me', (stale) => taken.push(stale.pid));
    expect(taken).toEqual([process.pid]);
    expect(JSON.parse(readFileSync(lockFileOf(dir), 'utf8'))).toMatchObject({ serves: 'me' });
    lock.release();
  });

  it('leaves a lock that is no longer its own on release', () => {
    const dir = dataDir();
    const lock = lockDataDir(dir, 'me');
    writeFileSync(lockFileOf(dir), 'someone else');
    lock.release();
    expect(readFileSync(lockFileOf(dir), 'utf8')).toBe('someone else');
  });
});
