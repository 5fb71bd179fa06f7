import { spawnSync } from 'node:child_process';

/** CI=true (set by .ci/run and by most CI services): every optional tool must be there. */
export const inCI = /^(1|true)$/i.test(process.env.CI ?? '');

/** Whether an external command runs (`<name> --version` exits 0). */
export function hasTool(name: string, versionArgs = ['--version']): boolean {
  return spawnSync(name, versionArgs, { stdio: 'ignore' }).status === 0;
}

/**
 * For `describe.skipIf(skipWithout('promtool'))`: true (skip) only when the tool is missing on a
 * developer's machine. In CI a missing tool is not a reason to skip: the checks run and fail, so
 * a CI image that lost the tool cannot pass by checking less.
 */
export function skipWithout(name: string, versionArgs?: string[]): boolean {
  return !inCI && !hasTool(name, versionArgs);
}
