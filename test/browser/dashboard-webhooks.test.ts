import type { AddressInfo } from 'node:net';
import { sql } from 'drizzle-orm';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser } from '../../src/users/auth.service.ts';
import { buildTestApp, listProperty, signUp, uniqueEmail, type TestApp } from '../helpers/app.ts';
import { launchChromium, watchedPage } from '../helpers/chromium.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

/*
 * The dashboard's Webhooks section in real headless Chromium: every host's endpoints, the failing
 * one first, with its state, what waits, what failed and its last failed attempts.
 */

const PASSWORD = 'dashboard password 1';
let db: TestDatabase;
let t: TestApp;
let base: string;
let browser: Browser;
let adminEmail: string;
let failingUrl: string;

beforeAll(async () => {
  db = await createTestDatabase('browserwh');
  t = await buildTestApp(db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  adminEmail = uniqueEmail('ops');
  await createUser(db.db, { email: adminEmail, password: PASSWORD, name: 'Olga Ops', role: 'admin' });

  const host = await signUp(t.app, 'host', 'Hanna Host');
  await listProperty(t.app, host);
  const register = async (url: string) =>
    (await t.app.inject({ method: 'POST', url: '/webhooks/endpoints', headers: host.auth, payload: { url } })).json().id as string;
  await register('http://127.0.0.1:9999/healthy');
  failingUrl = 'http://127.0.0.1:9999/pms-down';
  const failing = await register(failingUrl);
  // The failing endpoint: failing for two hours, one delivery pending for ten minutes, one failed for good after a 500.
  await db.db.execute(sql`
    with ep as (update webhook_endpoints set failing_since = now() - interval '2 hours', last_failure_at = now()
                 where public_id = ${failing}::uuid returning id, host_id),
         ev as (insert into webhook_events (public_id, host_id, type, body, occurred_at)
                select gen_random_uuid(), host_id, 'booking.created', '{}', now() from ep, generate_series(1, 2) returning id),
         d as (insert into webhook_deliveries (event_id, endpoint_id, status, created_at, finished_at)
               select ev.id, ep.id, case when row_number() over () = 1 then 'failed' else 'pending' end,
                      now() - interval '10 minutes', case when row_number() over () = 1 then now() end
                 from ev, ep returning id, status)
    insert into webhook_attempts (delivery_id, response_status, duration_ms, response_body)
    select id, 500, 12, 'boom' from d where status = 'failed'`);
  browser = await launchChromium();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await t?.app.close();
  await db?.drop();
});

async function openPage(): Promise<{ page: Page; problems: string[] }> {
  const { page, problems } = await watchedPage(browser, { width: 1280, height: 900 });
  await page.goto(`${base}/admin?refresh=1000`);
  await page.locator('#email').fill(adminEmail);
  await page.locator('#password').fill(PASSWORD);
  await page.locator('#sign-in-button').click();
  await page.locator('#webhooks tbody tr').first().waitFor({ timeout: 15_000 });
  return { page, problems };
}

describe('the webhooks section of the dashboard in Chromium', () => {
  it('lists every endpoint, the failing one first, with its state, waiting and failed deliveries and last failures', async () => {
    const { page, problems } = await openPage();
    expect(await page.locator('#webhooks-count').textContent()).toBe('(2 endpoints)');
    const rows = await page.evaluate(() =>
      [...document.querySelectorAll('#webhooks tbody tr')].map((tr) => ({
        cls: tr.className,
        cells: [...tr.querySelectorAll('td')].map((td) => td.textContent),
      })),
    );
    expect(rows).toHaveLength(2);
    const [first, second] = rows;
    expect(first!.cls).toBe('webhook-bad');
    expect(first!.cells[0]).toContain(failingUrl);
    expect(first!.cells[1]).toMatch(/^failing since /);
    expect(first!.cells.slice(2, 5)).toEqual(['1', expect.stringMatching(/^10m \d+s$/), '1']);
    expect(first!.cells[5]).toMatch(/booking\.created: HTTP 500/);
    expect(second!.cells[1]).toBe('unused');
    expect(second!.cells.slice(2, 6)).toEqual(['0', '—', '0', '—']);
    expect(problems).toEqual([]);
    await page.context().close();
  }, 60_000);
});
