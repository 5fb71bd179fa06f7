import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, copyFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser } from '../../src/users/auth.service.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { buildTestApp, signUp, uniqueEmail, type TestApp } from '../helpers/app.ts';
import { launchChromium, watchedPage } from '../helpers/chromium.ts';
import { bookingPayload } from '../../scripts/lib/booking-payload.ts';
import { entryArgs } from '../../scripts/lib/processes.ts';

/*
 * The dashboard in real headless Chromium (driven by playwright-core; a system Chromium when there
 * is one, else the one packaged in @sparticuz/chromium: test/helpers/chromium.ts): an admin signs
 * in, sees a dead letter, retries it with a confirmation, and watches it leave the dead list and
 * then be delivered by the real worker (src/commands/drain-outbox.ts with the file mail sink).
 *
 * The worker runs as its own process — the real entry point, as `npm start` runs it — rather than
 * through `main()` in this test process. (In-process, `main()` once unref'd the test runner's IPC
 * channel and vitest reported "Worker exited unexpectedly" after the tests passed; fixed in
 * drain-outbox since, but a process keeps the test independent of the runner's internals.)
 *
 * Each test seeds its own outbox (seedHour empties it first), so any one of them runs alone.
 *
 * Screenshots go to a temporary folder (TEST_ARTIFACTS to keep them elsewhere); with
 * UPDATE_SCREENSHOTS=1 the laptop one is also copied to docs/img/dashboard.png for the README.
 */

const ARTIFACTS = process.env.TEST_ARTIFACTS
  ? path.resolve(process.env.TEST_ARTIFACTS)
  : mkdtempSync(path.join(os.tmpdir(), 'stayhub-dashboard-shots-'));
const PASSWORD = 'dashboard password 1';

let db: TestDatabase;
let t: TestApp;
let base: string;
let browser: Browser;
let adminEmail: string;
const mailDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-dashboard-mail-'));

beforeAll(async () => {
  db = await createTestDatabase('browser');
  t = await buildTestApp(db);
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  adminEmail = uniqueEmail('ops');
  await createUser(db.db, { email: adminEmail, password: PASSWORD, name: 'Olga Ops', role: 'admin' });
  browser = await launchChromium();
  mkdirSync(ARTIFACTS, { recursive: true });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await t?.app.close();
  await db?.drop();
  rmSync(mailDir, { recursive: true, force: true });
});

/** What an outbox looks like after an hour of traffic: delivered messages, two backing off, two dead. */
async function seedHour(): Promise<{ deadBooking: string; deadProperty: string }> {
  // The test's own rows only, whatever ran before it.
  await db.pool.query('truncate outbox, outbox_audit');
  // 40 messages delivered over the last hour, each seconds after it was written, except during a
  // ten-minute mail-provider outage about half an hour ago, when they waited out their backoff.
  await db.pool.query(`
    insert into outbox (topic, payload, status, attempts, created_at, available_at, processed_at, handlers_done)
    select case when i % 3 = 0 then 'property.changed' else 'booking.created' end, '{}', 'DONE', 1,
           now() - make_interval(secs => 3500 - i * 85), now() - make_interval(secs => 3500 - i * 85),
           now() - make_interval(secs => 3500 - i * 85 - 5 - (i % 7) * 4
                                        - case when i between 14 and 21 then (22 - i) * 75 else 0 end), '{}'
      from generate_series(1, 40) as i`);
  // Two booking emails backing off after a provider error: pending, not due for a few minutes.
  await db.pool.query(`
    insert into outbox (topic, payload, status, attempts, created_at, available_at, last_error)
    select 'booking.created', '{}', 'PENDING', 3, now() - interval '95 seconds', now() + interval '5 minutes',
           'email.host-new-booking: SmtpError: 421 4.3.2 Service not available, closing channel'
      from generate_series(1, 2)`);
  const payload = bookingPayload({ guestEmail: 'gina@example.test', hostEmail: 'hal@example.test' });
  const { rows: a } = await db.pool.query(
    `insert into outbox (topic, key, payload, status, attempts, created_at, available_at, processed_at, last_error, handlers_done)
     values ('booking.created', $1, $2, 'DEAD', 8, now() - interval '25 minutes', now() - interval '16 minutes',
             now() - interval '16 minutes', 'email.host-new-booking: SmtpError: 550 5.1.1 Mailbox unavailable',
             '{email.guest-confirmation}')
     returning public_id`,
    [payload.bookingId, payload],
  );
  const { rows: b } = await db.pool.query(
    `insert into outbox (topic, key, payload, status, attempts, created_at, available_at, processed_at, last_error)
     values ('property.changed', $1, $2, 'DEAD', 8, now() - interval '40 minutes', now() - interval '31 minutes',
             now() - interval '31 minutes', 'search.index-property: Error: canceling statement due to statement timeout')
     returning public_id`,
    ['9b2e4c1a-0d5f-4e7a-8c3b-6f1d2e3a4b5c', { propertyId: '9b2e4c1a-0d5f-4e7a-8c3b-6f1d2e3a4b5c', reason: 'updated' }],
  );
  return { deadBooking: a[0].public_id, deadProperty: b[0].public_id };
}

function runWorkerUntilEmpty(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, entryArgs('src/commands/drain-outbox.ts', '--until-empty'), {
      env: { ...process.env, DATABASE_URL: db.url, MAIL_DIR: mailDir, LOG_LEVEL: 'warn', BACKOFF_JITTER: 'false' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, output }));
  });
}

/** A page that fails the test on any script error or Content-Security-Policy violation. */
const openPage = (viewport: { width: number; height: number }) => watchedPage(browser, viewport);

async function signIn(page: Page, email: string, password: string) {
  await page.goto(`${base}/admin?refresh=1000`);
  await page.locator('#email').fill(email);
  await page.locator('#password').fill(password);
  await page.locator('#sign-in-button').click();
}

const number = async (page: Page, id: string) => Number((await page.locator(`#${id}`).textContent())?.replace(/\D/g, ''));

describe('the outbox dashboard in Chromium', () => {
  it('refuses a non-admin at sign-in', async () => {
    const guest = await signUp(t.app, 'guest');
    const { page, problems } = await openPage({ width: 1280, height: 800 });
    await signIn(page, guest.user.email, 'correct horse battery');
    await expect.poll(() => page.locator('#sign-in-error').textContent()).toBe('This account is not an admin.');
    expect(await page.locator('#dashboard').isHidden()).toBe(true);
    // 401 from the rejected login is expected; nothing else.
    expect(problems.filter((p) => !/401|403/.test(p))).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('signs in, shows a dead letter, retries it, and the worker delivers it', async () => {
    const { deadBooking, deadProperty } = await seedHour();
    const { page, problems } = await openPage({ width: 1280, height: 800 });
    await signIn(page, adminEmail, PASSWORD);

    const row = page.locator(`#dead tr[data-id="${deadBooking}"]`);
    await row.waitFor({ timeout: 15_000 });
    await expect.poll(() => number(page, 'n-dead')).toBe(2);
    expect(await number(page, 'n-pending')).toBe(2);
    expect(await number(page, 'n-done')).toBe(40);
    expect(await row.textContent()).toContain('550 5.1.1 Mailbox unavailable');
    expect(await page.locator('#card-dead').getAttribute('class')).toContain('alarm');
    expect(await page.locator('#topics tbody tr').count()).toBe(2);
    // No NATS_URL here: the consumer groups are one line (test/browser/dashboard-events.test.ts has them).
    expect(await page.locator('#groups-off').textContent()).toBe('Consumer groups: events relay not configured (set NATS_URL).');
    expect(await page.locator('#groups-off').isVisible()).toBe(true);
    expect(await page.locator('#groups-panel').isHidden()).toBe(true);
    // The chart has a point a minute and something to show.
    expect(await page.locator('#chart polyline.pending').getAttribute('points')).toMatch(/^(\S+,\S+ ){60,}/);

    // The detail: payload and per-handler state, drawn as text.
    await row.locator('button.link').click();
    await expect.poll(() => page.locator('#detail-fields').textContent()).toContain('email.guest-confirmation: done');
    expect(await page.locator('#detail-fields').textContent()).toContain('email.host-new-booking: dead');
    expect(await page.locator('#detail-payload').textContent()).toContain('hal@example.test');
    await page.locator('#detail-close').click();
    await page.evaluate(() => window.scrollTo(0, 0));

    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard.png'), fullPage: true });
    // The README's copy changes on every run (times, ids): refreshed only when asked, so a test run
    // does not leave the tree modified. `UPDATE_SCREENSHOTS=1 npx vitest run test/browser`.
    if (process.env.UPDATE_SCREENSHOTS === '1') {
      mkdirSync(path.resolve('docs/img'), { recursive: true });
      copyFileSync(path.join(ARTIFACTS, 'dashboard.png'), path.resolve('docs/img/dashboard.png'));
    }

    // Retry, and accept the confirmation (a dismissed one must change nothing: checked first).
    // Every request the page sends to a retry endpoint is recorded: the dismissed click must send
    // none, which is checked once the accepted click's request has been answered (no sleep).
    const retryRequests: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST' && /\/admin\/outbox\/.*retry/.test(r.url())) retryRequests.push(r.url());
    });
    const dismissed = new Promise<void>((resolve) => page.once('dialog', (d) => void d.dismiss().then(() => resolve())));
    await row.locator('button.retry').click();
    await dismissed;
    const { rows: still } = await db.pool.query(`select status from outbox where public_id = $1`, [deadBooking]);
    expect(still[0].status).toBe('DEAD');

    let confirmText = '';
    page.once('dialog', (d) => {
      confirmText = d.message();
      void d.accept();
    });
    const answered = page.waitForResponse(
      (r) => r.request().method() === 'POST' && r.url().endsWith(`/admin/outbox/messages/${deadBooking}/retry`),
    );
    await row.locator('button.retry').click();
    expect((await answered).status()).toBe(200);
    expect(retryRequests, 'the dismissed confirmation sent a request').toEqual([`${base}/admin/outbox/messages/${deadBooking}/retry`]);
    // Back to PENDING: it leaves the dead list and joins the pending count.
    await row.waitFor({ state: 'detached', timeout: 15_000 });
    expect(confirmText).toContain(deadBooking);
    await expect.poll(() => number(page, 'n-pending')).toBe(3);
    expect(await number(page, 'n-dead')).toBe(1);
    await page.locator(`#dead tr[data-id="${deadProperty}"]`).waitFor();
    const { rows: audit } = await db.pool.query(`select actor, affected from outbox_audit where $1::uuid = any(message_ids)`, [
      deadBooking,
    ]);
    expect(audit).toEqual([{ actor: `admin:${adminEmail}`, affected: 1 }]);

    // The real worker, `npm run drain-outbox -- --until-empty`, delivers the replayed message only.
    const worker = await runWorkerUntilEmpty();
    expect(worker.code, worker.output).toBe(0);
    const { rows: delivered } = await db.pool.query(`select status, handlers_done from outbox where public_id = $1`, [deadBooking]);
    expect(delivered[0].status).toBe('DONE');
    expect(delivered[0].handlers_done.sort()).toEqual(['email.guest-confirmation', 'email.host-new-booking', 'webhooks.booking-created']);
    // Only the handler that had failed ran again: one email, to the host.
    const mails = readdirSync(mailDir).filter((f) => f.endsWith('.eml'));
    expect(mails).toHaveLength(1);
    expect(readFileSync(path.join(mailDir, mails[0]!), 'utf8')).toContain('hal@example.test');

    await expect.poll(() => number(page, 'n-done'), { timeout: 15_000 }).toBe(41);
    expect(await number(page, 'n-pending')).toBe(2);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-after-retry.png'), fullPage: true });
    expect(problems).toEqual([]);
    await page.context().close();
  }, 120_000);

  it('fits a phone screen without sideways scrolling', async () => {
    await seedHour();
    const { page, problems } = await openPage({ width: 390, height: 844 });
    await signIn(page, adminEmail, PASSWORD);
    await page.locator('#dead tbody tr').first().waitFor({ timeout: 15_000 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    // Two numbers a row on a phone.
    const boxes = await Promise.all(['#card-pending', '#card-oldest', '#card-dead'].map((s) => page.locator(s).boundingBox()));
    expect(boxes[0]!.y).toBe(boxes[1]!.y);
    expect(boxes[2]!.y).toBeGreaterThan(boxes[0]!.y);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-phone.png'), fullPage: true });
    // The Retry buttons are on screen, not behind a sideways scroll. Measured in one step: the
    // tables are redrawn every second.
    const rights = await page.evaluate(() =>
      [...document.querySelectorAll('#dead tbody button.retry, #topics tbody button')].map((b) => b.getBoundingClientRect().right),
    );
    expect(rights.length).toBeGreaterThanOrEqual(2);
    expect(Math.max(...rights)).toBeLessThanOrEqual(390);
    expect(problems).toEqual([]);
    await page.context().close();
  }, 60_000);
});
