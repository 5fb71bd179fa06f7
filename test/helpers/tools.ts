import { spawnSync } from 'node:child_process';
import { TestRunner } from 'vitest';

declare module 'vitest' {
  interface TaskMeta {
    /** Why tests of this file skip (recordSkip); test/helpers/skip-summary.ts lists them at the end of the run. */
    skipReasons?: string[];
  }
}

/** CI=1 or CI=true (set by .ci/run and by most CI services): every optional tool must be there. */
export const inCI = /^(1|true)$/i.test(process.env.CI ?? '');

/** Whether an external command runs (`<name> --version` exits 0). */
export function hasTool(name: string, versionArgs = ['--version']): boolean {
  return spawnSync(name, versionArgs, { stdio: 'ignore' }).status === 0;
}

/**
 * Notes why tests of the test file being collected skip, for the summary at the end of the run
 * (test/helpers/skip-summary.ts): a warning printed while the file loads scrolls away. Call it
 * while the file's tests are being defined (at its top level or in a describe), where the decision
 * to skip is made. Outside a test file it does nothing.
 */
export function recordSkip(reason: string): void {
  let file: { meta: { skipReasons?: string[] } } | undefined;
  try {
    const collector = TestRunner.getCurrentSuite() as unknown as { file?: typeof file; suite?: { file?: typeof file } };
    file = collector.file ?? collector.suite?.file;
  } catch {
    return; // not collecting a test file
  }
  if (!file) return;
  const reasons = (file.meta.skipReasons ??= []);
  if (!reasons.includes(reason)) reasons.push(reason);
}

/**
 * For `describe.skipIf(skipWithout('promtool'))`: true (skip) only when the tool is missing on a
 * developer's machine, and then the reason is recorded for the run's summary. In CI a missing tool
 * is not a reason to skip: the checks run and fail, so a CI image that lost the tool cannot pass by
 * checking less.
 */
export function skipWithout(name: string, versionArgs?: string[], install?: string): boolean {
  if (inCI || hasTool(name, versionArgs)) return false;
  recordSkip(`${name} not found${install ? ` (${install})` : ''}: its checks did not run (CI=1 or CI=true makes this a failure)`);
  return true;
}
