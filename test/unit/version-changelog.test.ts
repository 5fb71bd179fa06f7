import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { VERSION } from '../../src/version.ts';

/*
 * The version has four homes: package.json, package-lock.json (written by npm from package.json),
 * src/version.ts (what the API's OpenAPI document reports) and CHANGELOG.md's newest release heading. Releasing means moving [Unreleased] under a new
 * heading AND bumping the version; this keeps either from happening without the other.
 */
const read = (file: string): string => readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');

/** The newest released version: the first `## [x.y.z]` heading after `## [Unreleased]`. */
function newestRelease(changelog: string): string | undefined {
  return /^## \[(\d+\.\d+\.\d+)\]/m.exec(changelog)?.[1];
}

describe('the version', () => {
  it('finds the newest release heading, not [Unreleased]', () => {
    expect(newestRelease('# Changelog\n\n## [Unreleased]\n\n- x\n\n## [1.2.3] - 2026-01-01\n\n## [1.2.2]\n')).toBe('1.2.3');
    expect(newestRelease('# Changelog\n\n## [Unreleased]\n')).toBeUndefined();
  });

  it('is the same in package.json, package-lock.json, src/version.ts and the newest CHANGELOG release', () => {
    const pkg = JSON.parse(read('package.json')) as { version: string };
    const lock = JSON.parse(read('package-lock.json')) as { version: string; packages: { '': { version: string } } };
    const released = newestRelease(read('CHANGELOG.md'));
    expect(released, 'CHANGELOG.md has no "## [x.y.z]" release heading').toBeDefined();
    expect({ packageJson: pkg.version, packageLock: lock.version, lockRoot: lock.packages[''].version, api: VERSION }).toEqual({
      packageJson: released,
      packageLock: released,
      lockRoot: released,
      api: released,
    });
  });
});
