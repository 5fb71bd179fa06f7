import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PermanentError } from '../../../src/errors.ts';
import { serveWorkerMetrics } from '../../../src/metrics/worker-metrics.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { waitFor } from '../../helpers/wait.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The worker's metrics, fed by a real worker loop in-process against real Postgres, read over
 * HTTP from the small server drain-outbox starts when WORKER_METRICS_PORT is set.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('wmetrics');
});
afterAll(async () => {
  await tdb?.drop();
});

function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('worker metrics', () => {
  it('count outcomes by topic and handler, time handlers, and record claim batch sizes', async () => {
    const { logger } = captureLogger();
    const worker = createConfiguredWorker({
      db: tdb.db,
      config: workerConfig(tdb, { MAX_ATTEMPTS: '3' }),
      registry: new HandlerRegistry([
        testHandler('ok', 'test.fanout'),
        testHandler('flaky', 'test.fanout', async () => {
          throw new Error('downstream said no');
        }),
        testHandler('poison', 'test.poison', async () => {
          throw new PermanentError('cannot ever work');
        }),
      ]),
      logger,
      listen: false,
      housekeeping: false,
      batchSize: 10,
    });
    const server = await serveWorkerMetrics(worker.events, { port: 0, maxBatchSize: 10 });
    try {
      await insertMessages(tdb.db, [
        { topic: 'test.fanout' },
        { topic: 'test.fanout' },
        { topic: 'test.poison' },
        { topic: 'test.nobody' },
      ]);
      // One claim of all four; the fanout messages back off after 'flaky' fails, so they are not due again.
      await worker.runOnce();

      const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
      const text = await res.text();

      const outcome = (topic: string, handler: string, o: string) =>
        value(text, `stayhub_worker_handler_outcomes_total{topic="${topic}",handler="${handler}",outcome="${o}"}`);
      expect(outcome('test.fanout', 'ok', 'done')).toBe(2);
      expect(outcome('test.fanout', 'flaky', 'retry')).toBe(2);
      expect(outcome('test.poison', 'poison', 'dead')).toBe(1);
      expect(outcome('test.nobody', 'none', 'unknown_topic')).toBe(1);

      expect(value(text, 'stayhub_worker_handler_duration_seconds_count{topic="test.fanout",handler="ok",outcome="done"}')).toBe(2);
      expect(text).not.toMatch(/stayhub_worker_handler_duration_seconds_count\{[^}]*handler="none"/);

      expect(value(text, 'stayhub_worker_claim_batch_size_count')).toBe(1);
      expect(value(text, 'stayhub_worker_claim_batch_size_sum')).toBe(4);
      expect(value(text, 'stayhub_worker_claim_batch_size_bucket{le="5"}')).toBe(1);
      expect(value(text, 'stayhub_worker_claim_batch_size_bucket{le="2"}')).toBe(0);
      expect(text).toMatch(/^# TYPE process_cpu_seconds_total counter/m);

      expect((await fetch(`http://127.0.0.1:${server.port}/other`)).status).toBe(404);
    } finally {
      await server.close();
      await worker.stop();
    }
  });

  it('stops counting once closed, and frees its port', async () => {
    const events = new EventEmitter();
    const server = await serveWorkerMetrics(events, { port: 0 });
    const port = server.port;
    await server.close();
    expect(events.listenerCount('outcome')).toBe(0);
    expect(events.listenerCount('claimed')).toBe(0);
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
  });
});

describe('npm run drain-outbox with WORKER_METRICS_PORT', () => {
  it('serves /metrics while it runs and closes the port when it stops', { timeout: 60_000 }, async () => {
    const port = await freePort();
    const child = spawn(process.execPath, entryArgs('src/commands/drain-outbox.ts'), {
      env: {
        ...process.env,
        DATABASE_URL: tdb.url,
        WORKER_METRICS_PORT: String(port),
        LOG_LEVEL: 'warn',
        POLL_INTERVAL_MS: '100',
        MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-metrics-worker-')),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await insertMessages(tdb.db, [{ topic: 'test.only-in-this-test' }]);
      const text = await waitFor(
        async () => {
          const res = await fetch(`http://127.0.0.1:${port}/metrics`).catch(() => undefined);
          const body = res?.ok ? await res.text() : undefined;
          // This message's own line: other tests' messages in this database may be counted too.
          return body?.includes('topic="test.only-in-this-test",handler="none",outcome="unknown_topic"') ? body : undefined;
        },
        30_000,
        `the worker's /metrics to count the unknown topic (output so far: ${output})`,
      );
      expect(
        value(text, 'stayhub_worker_handler_outcomes_total{topic="test.only-in-this-test",handler="none",outcome="unknown_topic"}'),
      ).toBe(1);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited, output).toBe(0);
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
  });
});
