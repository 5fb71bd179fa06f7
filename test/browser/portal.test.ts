import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, signUp, type Session, type TestApp } from '../helpers/app.ts';
import { launchChromium, watchedPage } from '../helpers/chromium.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import type { Answer } from '../helpers/webhook-receiver.ts';
import { webhookKit } from '../helpers/webhooks.ts';

/*
 * The hosts' webhook portal (/portal) in real headless Chromium, against a real receiver on
 * 127.0.0.1 and a webhook sender running in this process: a host signs in, makes an endpoint,
 * sends a test, watches its attempts, makes the receiver fail and sees why, recovers, rotates the
 * secret and verifies a real delivery with the Node snippet the page shows (run for real); a
 * receiver's hostile answer stays text; another host sees none of it; a portal link opens the
 * same view without a password and stops when revoked or expired.
 *
 * Screenshots go to a temporary folder (TEST_ARTIFACTS to keep them elsewhere); with
 * UPDATE_SCREENSHOTS=1 they are also copied to docs/img/portal-*.png for docs/webhooks.md (a test
 * run leaves the tree as it was otherwise).
 */

const ARTIFACTS = process.env.TEST_ARTIFACTS
  ? path.resolve(process.env.TEST_ARTIFACTS)
  : mkdtempSync(path.join(os.tmpdir(), 'stayhub-portal-shots-'));
const PASSWORD = 'correct horse battery'; // signUp's
const LAPTOP = { width: 1280, height: 900 };
const PHONE = { width: 375, height: 800 };

let db: TestDatabase;
let t: TestApp;
let base: string;
let browser: Browser;
let host: Session;
let otherHost: Session;
const kit = webhookKit(
  {
    get db() {
      return db;
    },
    get app() {
      return t.app;
    },
  },
  { WEBHOOK_RETRY_SCHEDULE_SECONDS: '0.3' },
);

/** What the receiver answers now; the test changes it as the story goes. */
let answer: Answer = { status: 200, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' };
/** Filled in by the host's story, read by the tests after it. */
const made = { endpointId: '', url: '', deliveryId: '' };

async function shot(page: Page, name: string) {
  await page.screenshot({ path: path.join(ARTIFACTS, name), fullPage: true });
  if (process.env.UPDATE_SCREENSHOTS === '1') {
    mkdirSync(path.resolve('docs/img'), { recursive: true });
    copyFileSync(path.join(ARTIFACTS, name), path.resolve('docs/img', name));
  }
}

beforeAll(async () => {
  db = await createTestDatabase('browserportal');
  t = await buildTestApp(db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_MANUAL_SENDS_PER_MINUTE: '1000' });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  host = await signUp(t.app, 'host', 'Hanna Host');
  otherHost = await signUp(t.app, 'host', 'Otto Other');
  browser = await launchChromium();
  mkdirSync(ARTIFACTS, { recursive: true });
}, 120_000);

afterAll(async () => {
  await kit.closeAll();
  await browser?.close();
  await t?.app.close();
  await db?.drop();
});

async function signIn(session: Session, viewport = LAPTOP) {
  const { page, problems } = await watchedPage(browser, viewport);
  await page.goto(`${base}/portal/?refresh=600`);
  await page.locator('#email').fill(session.user.email);
  await page.locator('#password').fill(PASSWORD);
  await page.locator('#sign-in-button').press('Enter');
  await page.locator('#list-title').waitFor();
  return { page, problems };
}

/** The deliveries table's rows as text, newest first. */
const rows = (page: Page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('#deliveries tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')),
  );

async function waitForRow(page: Page, test: (cells: string[]) => boolean, what: string) {
  await expect.poll(async () => (await rows(page)).some(test), { timeout: 20_000, interval: 200, message: what }).toBe(true);
}

/** Elements that stick out of the viewport sideways (outside a box that scrolls them): none on a phone. */
const wider = (page: Page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('body *')]
      .filter((e) => !e.parentElement?.closest('.table-wrap') && !e.closest('[hidden]'))
      .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
      .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`),
  );

function run(cmd: string, args: string[], env: Record<string, string>, stdin: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = execFile(cmd, args, { env: { ...process.env, ...env } }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr }),
    );
    child.stdin!.end(stdin);
  });
}

describe('the webhook portal in Chromium', () => {
  it("walks a host's endpoint from creation to a verified delivery, a failure, a recovery and a rotation", async () => {
    const receiver = await kit.receiver(() => answer);
    kit.startSender();
    const { page, problems } = await signIn(host);

    // A URL the API refuses is refused in its words; then the real one.
    await page.locator('#new-endpoint').click();
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe('create-url');
    await page.locator('#create-url').fill('ftp://files.example.test/x');
    await page.locator('#create-submit').click();
    await expect.poll(() => page.locator('#create-error').textContent()).toBe('body.url: must be an http or https URL');
    await page.locator('#create-url').fill(receiver.url);
    await page.locator('#create-description').fill('Channel manager');
    // The rate is the next field by keyboard, described by its hint.
    await page.locator('#create-description').press('Tab');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('create-rate');
    expect(await page.evaluate(() => document.activeElement?.getAttribute('aria-describedby'))).toBe('create-rate-hint');
    await page.keyboard.type('5');
    await page.locator('#create-submit').click();
    await page.locator('#secret-panel').waitFor();
    const firstSecret = (await page.locator('#secret-value').textContent())!;
    expect(firstSecret).toMatch(/^whsec_/);
    made.endpointId = /#\/endpoints\/([0-9a-f-]{36})$/.exec(page.url())![1]!;
    made.url = receiver.url;
    await shot(page, 'portal-new-endpoint.png');
    await page.locator('#secret-done').click();
    expect(await page.content()).not.toContain(firstSecret);

    // A test event: the action says what it will do, then what it did; the attempt shows up.
    await page.locator('#act-test').click();
    expect(await page.locator('#confirm-text').textContent()).toContain(`to ${receiver.url} now`);
    await page.locator('#test-type').selectOption('booking.created');
    await page.locator('#confirm-go').click();
    await expect.poll(() => page.locator('#outcome').textContent()).toMatch(/^Sent: a booking\.created delivery/);
    await waitForRow(page, (c) => c[1] === 'booking.created' && c[2] === 'succeeded' && c[4]!.startsWith('HTTP 200'), 'the test succeeded');
    await page.locator('#deliveries tbody tr a').first().click();
    await page.locator('#attempts li.ok').waitFor();
    expect(await page.locator('#attempts .response-body').first().textContent()).toBe('{"ok":true}');
    expect(await page.locator('#delivery-request-body').textContent()).toBe(receiver.received[0]!.body);
    const webhookId = String(receiver.received[0]!.headers['webhook-id']);
    expect(await page.locator('#delivery-request-headers').textContent()).toContain(`webhook-id: ${webhookId}`);
    await shot(page, 'portal-delivery.png');

    // The receiver fails, hostile: markup, script, NUL, invalid UTF-8 and a direction override.
    answer = {
      status: 500,
      // A header value's raw bytes (latin1 here): markup and a direction override, in UTF-8.
      headers: {
        'content-type': 'text/html',
        'x-hostile': Buffer.from('<img src=x onerror="window.__pwned = 3">\u202Eevil').toString('latin1'),
      },
      body: Buffer.concat([
        Buffer.from('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">\u0000 \u202Eevil'),
        Buffer.from([0xff, 0xfe]),
        Buffer.from('A'.repeat(1500)),
      ]),
    };
    await page.locator('#delivery-close').click();
    await page.locator('#act-test').click();
    await page.locator('#confirm-go').click();
    await waitForRow(page, (c) => c[1] === 'webhook.test' && c[2] === 'failed', 'the test failed for good');
    const failedRow = (await rows(page)).find((c) => c[2] === 'failed')!;
    expect(failedRow[3]).toBe('2');
    expect(failedRow[4]).toMatch(/^HTTP 500/);
    await expect
      .poll(() => page.locator('#ep-health').textContent())
      .toMatch(/Last failure.*HTTP 500 — <script>window\.__pwned = 1<\/script>/s);
    await page.locator('#deliveries tbody tr.status-failed a').click();
    await page.locator('#attempts li.bad').first().waitFor();
    const shown = (await page.locator('#attempts .response-body').first().textContent())!;
    expect(shown).toContain('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">');
    expect(shown).toContain('\uFFFD'); // the NUL and the invalid bytes, as the API stores them
    expect(shown).toContain('\\u{202E}evil'); // the direction override shown, not obeyed
    expect(shown).toMatch(/A\n… \d+ more characters not shown$/); // the first KiB, and how much was left out
    expect(shown.split('\n…')[0]!.replace('\\u{202E}', '\u202E').length).toBe(1024);
    // The attempt's headers: the signature its receiver got, and what the receiver answered, inert.
    const signed = receiver.received[1]!.headers;
    expect(await page.locator('#attempts .request-headers').first().textContent()).toBe(
      ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => `${h}: ${String(signed[h])}`).join('\n'),
    );
    const answered = (await page.locator('#attempts .response-headers').first().textContent())!;
    expect(answered).toMatch(/^content-type: text\/html$/m);
    expect(answered).toContain('x-hostile: <img src=x onerror="window.__pwned = 3">\\u{202E}evil');
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(await page.locator('#attempts script, #attempts img, #ep-health script, #ep-health img').count()).toBe(0);
    made.deliveryId = /deliveries\/([0-9a-f-]{36})$/.exec(page.url())![1]!;
    await shot(page, 'portal-failure.png');

    // Recover: everything that failed in the last day, sent again to a receiver that answers now.
    answer = { status: 204 };
    await page.locator('#act-recover').click();
    expect(await page.locator('#confirm-text').textContent()).toMatch(/^Sends again every delivery .* that failed for good/);
    await page.locator('#confirm-go').click();
    await expect
      .poll(() => page.locator('#outcome').textContent())
      .toBe('Done: 1 failed delivery sent again, and 0 events it never had on their way.');
    await waitForRow(page, (c) => c[1] === 'webhook.test' && c[2] === 'succeeded' && c[3] === '3', 'the recovered delivery succeeded');

    // Rotate: the new secret once, the overlap stated; then a delivery verified by the Node snippet.
    await page.locator('#act-rotate').click();
    expect(await page.locator('#confirm-text').textContent()).toContain('keeps signing beside it for 24 hours');
    await page.locator('#confirm-go').click();
    await page.locator('#secret-panel').waitFor();
    const newSecret = (await page.locator('#secret-value').textContent())!;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(firstSecret);
    expect(await page.locator('#secret-overlap').textContent()).toMatch(/keeps signing beside this one for 24 hours/);
    expect(await page.locator('#secret-copy').isVisible()).toBe(true);
    await shot(page, 'portal-rotated.png');
    await page.locator('#secret-done').click();
    const html = await page.content();
    expect(html).not.toContain(newSecret);
    expect(html).not.toContain(firstSecret);
    expect(t.logs.text).not.toContain(newSecret.slice(6));
    expect(t.logs.text).not.toContain(firstSecret.slice(6));

    const before = receiver.received.length;
    await page.locator('#act-test').click();
    await page.locator('#confirm-go').click();
    await expect.poll(() => receiver.received.length, { timeout: 20_000 }).toBeGreaterThan(before);
    const got = receiver.received.at(-1)!;
    expect(String(got.headers['webhook-signature']).split(' ')).toHaveLength(2); // old and new, overlapping

    await page.locator('#snippet-lang').selectOption('node');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-portal-snippet-'));
    writeFileSync(path.join(dir, 'verify.mjs'), (await page.locator('#snippet').textContent())!);
    const headers = {
      WEBHOOK_ID: String(got.headers['webhook-id']),
      WEBHOOK_TIMESTAMP: String(got.headers['webhook-timestamp']),
      WEBHOOK_SIGNATURE: String(got.headers['webhook-signature']),
    };
    const verify = (secret: string, body = got.body) =>
      run(process.execPath, [path.join(dir, 'verify.mjs')], { ...headers, STAYHUB_WEBHOOK_SECRET: secret }, body);
    expect(await verify(newSecret)).toEqual({ code: 0, out: 'signature verified\n' });
    expect(await verify(firstSecret)).toEqual({ code: 0, out: 'signature verified\n' }); // still overlapping
    expect((await verify(newSecret, got.body.replace('}', ' }'))).code).toBe(1);
    expect((await verify(`whsec_${Buffer.alloc(32, 7).toString('base64')}`)).code).toBe(1);

    await page.locator('#snippet-lang').selectOption('python');
    writeFileSync(path.join(dir, 'verify.py'), (await page.locator('#snippet').textContent())!);
    const py = await run('python3', [path.join(dir, 'verify.py')], { ...headers, STAYHUB_WEBHOOK_SECRET: newSecret }, got.body);
    expect(py).toEqual({ code: 0, out: 'signature verified\n' });

    // curl + openssl: verifies, then replays the request unchanged to the receiver (REPLAY_TO).
    await page.locator('#snippet-lang').selectOption('shell');
    writeFileSync(path.join(dir, 'verify.sh'), (await page.locator('#snippet').textContent())!);
    const received = receiver.received.length;
    const shell = await run(
      'sh',
      [path.join(dir, 'verify.sh')],
      { ...headers, STAYHUB_WEBHOOK_SECRET: newSecret, REPLAY_TO: receiver.url },
      got.body,
    );
    expect(shell).toEqual({ code: 0, out: 'signature verified\nreplayed: HTTP 204\n' });
    expect(receiver.received.length).toBe(received + 1);
    expect(receiver.received.at(-1)!.body).toBe(got.body);
    expect(receiver.received.at(-1)!.headers['webhook-signature']).toBe(got.headers['webhook-signature']);
    const forged = await run('sh', [path.join(dir, 'verify.sh')], { ...headers, STAYHUB_WEBHOOK_SECRET: newSecret }, `${got.body} `);
    expect(forged).toEqual({ code: 1, out: 'signature does not match\n' });

    // The one error the browser logged: the refused URL's 400, asked for above.
    expect(problems).toEqual(['console: Failed to load resource: the server responded with a status of 400 (Bad Request)']);
    await page.context().close();
  }, 180_000);

  it('lists endpoints with their health at a glance, and fits a phone', async () => {
    const { page, problems } = await signIn(host, PHONE);
    const card = page.locator('#endpoints article').first();
    await card.waitFor();
    const text = (await card.textContent())!;
    expect(text).toContain(made.url);
    expect(text).toMatch(/Success, last hour\d+% \(\d+ of \d+\)/);
    expect(text).toMatch(/Last failure.*HTTP 500/);
    expect(text).toContain('Rate limit5 per second');
    expect(await wider(page)).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width);
    await shot(page, 'portal-list-phone.png');
    await page.goto(`${base}/portal/?refresh=600#/endpoints/${made.endpointId}`);
    await page.locator('#ep-title').waitFor();
    await expect.poll(() => page.locator('#deliveries tbody tr').count()).toBeGreaterThan(0);
    expect(await wider(page)).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width);
    expect(problems).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('is usable by keyboard alone: focus moves to what each step opens', async () => {
    const { page, problems } = await signIn(host);
    await page.locator('#endpoints article a').first().focus();
    await page.keyboard.press('Enter');
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe('ep-title');
    await page.locator('#act-toggle').focus();
    await page.keyboard.press('Enter');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('confirm-go');
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('confirm-cancel');
    await page.keyboard.press('Enter');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('act-toggle');
    // Every control has a name a screen reader can say.
    const unnamed = await page.evaluate(() =>
      [...document.querySelectorAll('input, select, button, a')]
        .filter((e) => !(e as HTMLElement).closest('[hidden]'))
        .filter((e) => {
          const label = (e as HTMLInputElement).labels?.[0]?.textContent || e.getAttribute('aria-label') || e.textContent;
          return !label || !label.trim();
        })
        .map((e) => e.outerHTML.slice(0, 80)),
    );
    expect(unnamed).toEqual([]);
    expect(problems).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('shows another host none of it, by URL or by id, and lets it change nothing', async () => {
    const { page, problems } = await signIn(otherHost);
    expect(await page.locator('#endpoints').textContent()).not.toContain(made.url);
    for (const [i, hash] of [`#/endpoints/${made.endpointId}`, `#/endpoints/${made.endpointId}/deliveries/${made.deliveryId}`].entries()) {
      await page.goto(`${base}/portal/?refresh=${601 + i}${hash}`); // a new document each time, not a fragment change
      await page.locator('#error').waitFor();
      await expect.poll(() => page.locator('#error').textContent()).toContain('Not found');
      expect(await page.locator('#view-endpoint').isHidden()).toBe(true);
      expect(await page.content()).not.toContain(made.url);
    }
    // The page's own token, used by hand against each route with the first host's ids.
    const statuses = await page.evaluate(
      async ({ endpointId, deliveryId }) => {
        const token = sessionStorage.getItem('stayhub.portalToken');
        const call = async (method: string, url: string, body?: unknown) =>
          (
            await fetch(url, {
              method,
              headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
              body: body ? JSON.stringify(body) : undefined,
            })
          ).status;
        return [
          await call('PATCH', `/webhooks/endpoints/${endpointId}`, { enabled: false }),
          await call('POST', `/webhooks/endpoints/${endpointId}/rotate-secret`),
          await call('POST', `/webhooks/deliveries/${deliveryId}/retry`),
          await call('GET', `/webhooks/deliveries/${deliveryId}`),
          await call('DELETE', `/webhooks/endpoints/${endpointId}`),
        ];
      },
      { endpointId: made.endpointId, deliveryId: made.deliveryId },
    );
    expect(statuses).toEqual([404, 404, 404, 404, 404]);
    const still = await t.app.inject({ method: 'GET', url: `/webhooks/endpoints/${made.endpointId}`, headers: host.auth });
    expect(still.json().enabled).toBe(true);
    expect(problems.filter((p) => !p.includes('404'))).toEqual([]);
    await page.context().close();
  }, 60_000);

  it('opens the same view through a portal link without a password, until it is revoked or expires', async () => {
    const { page: hostPage, problems: hostProblems } = await signIn(host);
    await hostPage.locator('#nav-links').click();
    await hostPage.locator('#links-title').waitFor();
    await hostPage.locator('#link-label').fill('Ana, PMS developer');
    await hostPage.locator('#link-create').click();
    await hostPage.locator('#link-made').waitFor();
    const url = (await hostPage.locator('#link-made-url').textContent())!;
    expect(url).toMatch(/\/portal\/#link=whpl_/);
    await shot(hostPage, 'portal-links.png');
    await hostPage.locator('#link-made-done').click();
    expect(await hostPage.content()).not.toContain(url.split('#link=')[1]!);

    // The developer: a fresh browser context, no password, the link's address.
    const { page: dev, problems: devProblems } = await watchedPage(browser, LAPTOP);
    await dev.goto(url.replace(/^http:\/\/[^/]+/, base).replace('/portal/#', '/portal/?refresh=600#'));
    await dev.locator('#endpoints article').first().waitFor();
    expect(dev.url()).not.toContain('whpl_'); // out of the address bar at once
    expect(await dev.locator('#who').textContent()).toMatch(/^Hanna Host's endpoints · link, read only, until /);
    expect(await dev.locator('#endpoints').textContent()).toContain(made.url);
    expect(await dev.locator('#new-endpoint').isVisible()).toBe(false);
    expect(await dev.locator('#nav-links').isVisible()).toBe(false);
    await dev.goto(`${base}/portal/?refresh=600#/endpoints/${made.endpointId}`);
    await dev.locator('#ep-title').waitFor();
    await expect.poll(() => dev.locator('#deliveries tbody tr').count()).toBeGreaterThan(0);
    expect(await dev.locator('#act-rotate').isVisible()).toBe(false);
    await shot(dev, 'portal-link-view.png');

    // The host revokes it (the browser's confirmation accepted); the developer's next poll ends.
    hostPage.once('dialog', (d) => void d.accept());
    await hostPage.locator('#links tbody tr button.danger').first().click();
    await expect.poll(() => hostPage.locator('#outcome').textContent()).toMatch(/^Revoked/);
    await dev.locator('#link-ended').waitFor({ timeout: 10_000 });
    expect(await dev.locator('#app').isHidden()).toBe(true);

    // Its uses, for the host to read.
    await hostPage.locator('#links tbody tr button.secondary').first().click();
    await hostPage.locator('#uses').waitFor();
    const uses = (await hostPage.locator('#uses-table tbody').textContent())!;
    expect(uses).toContain('GET /webhooks/portal/session');
    expect(uses).toContain('401');

    // An expired link: the same end.
    const expiring = (
      await t.app.inject({ method: 'POST', url: '/webhooks/portal-links', headers: host.auth, payload: { access: 'full' } })
    ).json();
    await db.db.execute(
      sql`update webhook_portal_links set expires_at = now() - interval '1 second' where public_id = ${expiring.id}::uuid`,
    );
    const { page: late, problems: lateProblems } = await watchedPage(browser, LAPTOP);
    await late.goto(`${base}/portal/#${expiring.url.split('#')[1]}`);
    await late.locator('#link-ended').waitFor();
    expect(await late.locator('#app').isHidden()).toBe(true);

    expect(t.logs.text).not.toContain('whpl_'); // the fragment never reaches the server, nor its logs
    expect(hostProblems).toEqual([]);
    // A revoked or expired link's requests are refused with a 401, which Chromium logs as a console error.
    expect([...devProblems, ...lateProblems].filter((p) => !p.includes('401'))).toEqual([]);
    for (const p of [hostPage, dev, late]) await p.context().close();
  }, 90_000);
});
