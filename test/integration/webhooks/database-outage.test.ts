import { afterEach, describe, expect, it } from 'vitest';
import { startTcpProxy } from '../../../scripts/lib/tcp-proxy.ts';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import { createWebhookSender } from '../../../src/webhooks/delivery/sender.ts';
import { OutageLog } from '../../../src/webhooks/delivery/outage-log.ts';
import { listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { webhookKit } from '../../helpers/webhooks.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The webhook sender while its database is down: one line when the outage starts and one when it
 * ends, with how long and how many statements failed, never a stack trace per poll; and what was
 * due meanwhile is sent once the database answers.
 */

const t = useTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
const kit = webhookKit(t);

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  await kit.closeAll();
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

describe('the webhook sender while the database is down', () => {
  it('logs one line when the outage starts and a summary when it ends, no stack trace per poll', async () => {
    const host = await signUp(t.app, 'host');
    const property = (await listProperty(t.app, host)).id;
    const healthy = await kit.receiver();
    await kit.register(host, { url: healthy.url });

    const proxy = await startTcpProxy(t.db.url);
    const database: Database = createDatabase(proxy.url, { max: 4 });
    const { logger, entries } = captureLogger();
    const sender = createWebhookSender({
      db: database.db,
      pool: database.pool,
      config: workerConfig(t.db, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', POLL_INTERVAL_MS: '50' }),
      logger,
    });
    cleanup.push(async () => {
      await sender.stop(1000);
      await database.close();
      await proxy.close();
    });
    sender.start();
    await kit.bookingEvent(property);
    await waitFor(async () => healthy.received.length === 1, 10_000, 'the delivery before the outage');

    proxy.setDown(true);
    // Written straight to the database (not through the proxy): due while the sender cannot claim it.
    await kit.bookingEvent(property);
    // Forty claims at least refused, at one every 50 ms: each used to log an error with its stack.
    await waitFor(async () => proxy.refused() >= 40, 20_000, 'forty refused connections');
    const during = entries().filter((e) => e.component === 'webhooks');
    expect(during.map((e) => e.msg)).toEqual([
      'webhook sender: the database is unreachable; claims and records are retried every poll until it answers',
    ]);
    expect(during[0]).toMatchObject({ level: 40, during: 'claim', reason: expect.any(String) });

    proxy.setDown(false);
    const [summary] = await waitFor(
      async () => {
        const back = entries().filter((e) => String(e.msg).includes('answers again'));
        return back.length > 0 && back;
      },
      10_000,
      'the line saying the database answers again',
    );
    expect(summary).toMatchObject({ level: 30, failures: expect.any(Number), downSeconds: expect.any(Number) });
    expect(summary!.failures).toBeGreaterThanOrEqual(20); // a claim or more per refused poll, each once a line of its own
    await waitFor(async () => healthy.received.length === 2, 10_000, 'the delivery due during the outage');

    const all = entries().filter((e) => e.component === 'webhooks');
    expect(all).toHaveLength(2);
    expect(JSON.stringify(all)).not.toMatch(/stack|"err"/);
  });

  it('reminds at most once a minute while the outage lasts, and logs an error that is no outage in full', () => {
    const { logger, entries } = captureLogger();
    let now = 0;
    const outage = new OutageLog(logger, 60_000, () => now);
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    for (now = 0; now <= 150_000; now += 1000) outage.failed(refused, 'claim', 'webhook claim failed');
    expect(entries().map((e) => [e.msg, e.failures])).toEqual([
      ['webhook sender: the database is unreachable; claims and records are retried every poll until it answers', undefined],
      ['webhook sender: the database is still unreachable', 61],
      ['webhook sender: the database is still unreachable', 121],
    ]);
    outage.succeeded();
    outage.succeeded(); // nothing more: the outage is over
    expect(entries().at(-1)).toMatchObject({ msg: 'webhook sender: the database answers again; what waited is sent', failures: 151 });
    expect(entries()).toHaveLength(4);

    // A bug is not an outage: every one is logged, with its stack.
    const bug = Object.assign(new Error('column "nope" does not exist'), { code: '42703' });
    expect(outage.failed(bug, 'claim', 'webhook claim failed')).toBe(false);
    expect(outage.failed(bug, 'claim', 'webhook claim failed')).toBe(false);
    expect(
      entries()
        .slice(4)
        .map((e) => [e.msg, typeof (e.err as { stack?: string }).stack]),
    ).toEqual([
      ['webhook claim failed', 'string'],
      ['webhook claim failed', 'string'],
    ]);
    expect(outage.down).toBe(false);
  });
});
