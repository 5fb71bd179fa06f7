import { existsSync } from 'node:fs';
import sparticuz from '@sparticuz/chromium';
import { chromium, type Browser, type Page } from 'playwright-core';

/**
 * Which Chromium the browser tests drive: CHROMIUM_PATH when set, else a system Chromium
 * (/usr/bin/chromium, Debian's), else the one shipped inside the dev dependency
 * @sparticuz/chromium, so `npm install && npm test` needs no apt step. The packaged one is
 * unpacked to the OS temp folder on first use (a few seconds) and reused after.
 */
export async function chromiumExecutable(): Promise<{ path: string; packaged: boolean }> {
  const configured = process.env.CHROMIUM_PATH;
  if (configured) {
    if (!existsSync(configured)) throw new Error(`CHROMIUM_PATH=${configured} does not exist`);
    return { path: configured, packaged: false };
  }
  for (const candidate of ['/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (existsSync(candidate)) return { path: candidate, packaged: false };
  }
  return { path: await sparticuz.executablePath(), packaged: true };
}

const SYSTEM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];

/** A headless Chromium for a test file; close it in afterAll. */
export async function launchChromium(): Promise<Browser> {
  const exe = await chromiumExecutable();
  return chromium.launch({
    executablePath: exe.path,
    headless: true,
    // The test runner owns this process's signals; the browser is closed in afterAll.
    handleSIGINT: false,
    handleSIGTERM: false,
    handleSIGHUP: false,
    // The packaged build is a headless shell with its own flags (no sandbox, no zygote), less
    // --single-process: made for Lambda, it ends the whole browser when a test closes its context.
    args: exe.packaged ? sparticuz.args.filter((a) => a !== '--single-process') : SYSTEM_ARGS,
  });
}

/** A page in a fresh context that records every script error and Content-Security-Policy violation: tests fail on any. */
export async function watchedPage(
  browser: Browser,
  viewport: { width: number; height: number },
): Promise<{ page: Page; problems: string[] }> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });
  return { page, problems };
}
