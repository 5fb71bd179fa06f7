import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddedPostgres, embeddedDataDir, unsearchableFolder } from '../../src/db/embedded.ts';

/*
 * As root the embedded server runs as `postgres`, which cannot reach the default data folder
 * `.data/postgres` of a checkout in a private folder (/root, `mktemp -d`: 0700): `npm start` from
 * a fresh clone there stopped, asking for EMBEDDED_PG_DIR. Here a checkout sits in a 0700 folder,
 * a 0755 folder stands for /var/tmp, and `nobody` (65534) stands for the server's user.
 */
const NOBODY = 65534;
const ids = { uid: NOBODY, gid: NOBODY };
const isRoot = process.getuid?.() === 0;
const hidden = mkdtempSync(path.join(os.tmpdir(), 'stayhub-private-')); // 0700, like mktemp -d
const root = path.join(hidden, 'app');
const other = path.join(hidden, 'other-app');
const base = mkdtempSync(path.join(os.tmpdir(), 'stayhub-var-tmp-'));
chmodSync(base, 0o755);
afterAll(() => {
  rmSync(hidden, { recursive: true, force: true });
  rmSync(base, { recursive: true, force: true });
});

const defaultDir = path.join(root, '.data', 'postgres');
const choose = (env: NodeJS.ProcessEnv, at = root, as: { uid?: number; gid?: number } = ids) =>
  embeddedDataDir({ root: at, configured: env.EMBEDDED_PG_DIR ?? '.data/postgres', env, ids: as, base });

describe("the embedded server's data folder, as root", () => {
  it("is the default one when the server's user can reach it, or when nobody else runs the server", () => {
    chmodSync(hidden, 0o755);
    try {
      expect(choose({})).toEqual({ dataDir: defaultDir });
    } finally {
      chmodSync(hidden, 0o700);
    }
    expect(choose({}, root, {})).toEqual({ dataDir: defaultDir });
  });

  it("moves, when the default one is hidden in a private checkout, to a reachable folder of the checkout's own", () => {
    expect(unsearchableFolder(defaultDir, NOBODY, NOBODY)).toBe(hidden);
    const chosen = choose({});
    expect(chosen.unreachable).toBe(defaultDir);
    expect(path.dirname(path.dirname(chosen.dataDir))).toBe(base);
    expect(path.basename(path.dirname(chosen.dataDir))).toMatch(/^stayhub-[0-9a-f]{12}$/);
    expect(path.basename(chosen.dataDir)).toBe('postgres');
    expect(statSync(path.dirname(chosen.dataDir)).mode & 0o777).toBe(0o755);
    expect(unsearchableFolder(chosen.dataDir, NOBODY, NOBODY)).toBeUndefined();

    // The same checkout finds the same folder again; another checkout gets its own.
    expect(choose({})).toEqual(chosen);
    expect(choose({ EMBEDDED_PG_DIR: '.data/postgres' })).toEqual(chosen); // a `.env` copied from .env.example
    // EMBEDDED_PG_DIR= (empty) is unset, so config.ts gives the default: nobody's choice either.
    expect(embeddedDataDir({ root, configured: '.data/postgres', env: { EMBEDDED_PG_DIR: '' }, ids, base })).toEqual(chosen);
    expect(choose({}, other).dataDir).not.toBe(chosen.dataDir);
  });

  it('stays where EMBEDDED_PG_DIR puts it on purpose, and such a folder out of reach is refused, named', async () => {
    const given = path.join(hidden, 'mine');
    expect(choose({ EMBEDDED_PG_DIR: given })).toEqual({ dataDir: given });
    expect(choose({ EMBEDDED_PG_DIR: 'pg' })).toEqual({ dataDir: path.join(root, 'pg') });
    if (isRoot) {
      const server = new EmbeddedPostgres({ dataDir: given, port: 1, user: 'postgres', password: 'x' });
      await expect(server.initialise()).rejects.toThrow(`${hidden} is private to its owner. Set EMBEDDED_PG_DIR`);
    }
  });

  it('is never a folder of that name that someone else made, or a symlink planted in its place', () => {
    // `base` is writable by everyone and the name is predictable: someone may have been there first.
    const folder = path.dirname(choose({}, other).dataDir);
    rmSync(folder, { recursive: true });
    const elsewhere = path.join(hidden, 'elsewhere');
    mkdirSync(elsewhere);
    symlinkSync(elsewhere, folder);
    expect(() => choose({}, other)).toThrow(`${folder}, the folder used instead, is not a folder of ours`);
    rmSync(folder);
    if (isRoot) {
      mkdirSync(folder, { mode: 0o755 });
      chownSync(folder, NOBODY, NOBODY);
      expect(() => choose({}, other)).toThrow(`${folder}, the folder used instead, is not a folder of ours`);
    }
  });
});
