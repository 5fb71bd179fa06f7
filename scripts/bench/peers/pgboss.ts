import PgBoss from 'pg-boss';
import pg from 'pg';
import { LatencyProbe } from '../lib/latency.ts';
import { nowMs } from '../lib/marks.ts';
import { PENDING, watchSettled } from '../lib/settled.ts';
import type { PgBossConfig } from '../params.ts';

/**
 * pg-boss set up for throughput: work() fetching large batches (a batch per fetch, completed
 * together) at its shortest polling interval (0.5 s, pg-boss's minimum), in each configuration
 * of params.ts's pgBossConfigs (batch size, number of work() loops); the report compares the best.
 * pg-boss 10 polls; it has no LISTEN/NOTIFY wake-up, which is why its latency is bound to the
 * polling interval. Background maintenance and cron are off, so nothing but the measured work runs.
 */
export const PGBOSS_POLL_SECONDS = 0.5;

/** "batch 5,000 × 1 work()": a configuration's label in logs and the report. */
export const pgBossLabel = (c: PgBossConfig) => `batch ${c.batchSize.toLocaleString('en-US')} × ${c.workers} work()`;

/** `cfg.workers` work() loops on `name`, each fetching up to `cfg.batchSize` jobs per poll. */
export async function workAll(boss: PgBoss, name: string, cfg: PgBossConfig, pollSeconds: number, handler: () => Promise<void>) {
  for (let i = 0; i < cfg.workers; i++) {
    await boss.work(name, { batchSize: cfg.batchSize, pollingIntervalSeconds: pollSeconds }, handler);
  }
}

export async function startBoss(url: string): Promise<PgBoss> {
  const boss = new PgBoss({ connectionString: url, max: 10, supervise: false, schedule: false });
  boss.on('error', (err) => console.error('pg-boss error:', err));
  await boss.start();
  return boss;
}

export async function setupPgBoss(url: string): Promise<void> {
  const boss = await startBoss(url); // installs its schema
  await boss.stop({ graceful: false, wait: true });
}

export async function pgBossDrain(url: string, jobs: number, run: number, cfg: PgBossConfig) {
  const boss = await startBoss(url);
  const name = `drain_${run}_${Date.now()}`; // a fresh queue (its own partition) per run
  await boss.createQueue(name);
  for (let i = 0; i < jobs; i += 5000) {
    const chunk = Array.from({ length: Math.min(5000, jobs - i) }, (_, k) => ({ name, data: { i: i + k } }));
    await boss.insert(chunk);
  }
  const check = new pg.Client({ connectionString: url });
  await check.connect();
  await check.query('analyze pgboss.job');
  await check.end();
  const watch = watchSettled(url, PENDING.pgBoss, [name]);
  try {
    let firstMs: number | undefined; // the same start rule as the other systems (lib/marks.ts)
    await workAll(boss, name, cfg, PGBOSS_POLL_SECONDS, async () => {
      firstMs ??= nowMs();
    });
    // The clock stops when nothing of the queue is left unsettled (lib/settled.ts), as for every system.
    const settledAt = await watch.settled;
    const drainMs = settledAt - firstMs!;
    return { perSecond: (jobs * 1000) / drainMs, drainSeconds: drainMs / 1000 };
  } finally {
    await watch.stop();
    await boss.stop({ graceful: false, wait: true });
  }
}

export async function pgBossLatency(url: string, samples: number) {
  const boss = await startBoss(url);
  const name = `latency_${Date.now()}`;
  await boss.createQueue(name);
  const probe = new LatencyProbe();
  try {
    await boss.work(name, { batchSize: 1, pollingIntervalSeconds: PGBOSS_POLL_SECONDS }, async ([job]) => {
      probe.arrived((job!.data as { id: number }).id);
    });
    return await probe.run({
      url,
      samples,
      insert: async (client, id) => {
        // pg-boss's own send(), run on the sample's transaction through its `db` option.
        await boss.send(name, { id }, { db: { executeSql: (text, values) => client.query(text, values) } });
      },
      // A pause drawn over the whole polling interval: without it every sample would land at the
      // same point of pg-boss's poll cycle (right after a fetch: the worst case, every time).
      pauseMs: () => Math.random() * PGBOSS_POLL_SECONDS * 1000,
      timeoutMs: 30_000,
    });
  } finally {
    await boss.stop({ graceful: false, wait: true });
  }
}
