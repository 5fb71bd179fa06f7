import { PgBoss, type Queue } from 'pg-boss';
import type pg from 'pg';
import { uuidV7 } from '../../../src/db/uuid-v7.ts';
import { withClient } from '../../lib/postgres.ts';
import { LatencyProbe } from '../lib/latency.ts';
import { nowMs } from '../lib/marks.ts';
import { PENDING, watchSettled } from '../lib/settled.ts';
import type { PgBossConfig } from '../params.ts';

/**
 * pg-boss 12 set up for throughput as its docs tune it: work() fetching large batches (a batch per
 * fetch, completed together), `localConcurrency` fetch loops, `burstWhenBatchFull` (fetch again at
 * once while batches come back full), woken by LISTEN/NOTIFY (`useListenNotify` and the queue's
 * `notify`), its shortest polling interval (0.5 s) as the backstop. Background maintenance and cron
 * are off, so nothing but the measured work runs.
 *
 * Two ways, side by side (PgBossConfig.keyed):
 * - fastest: a `standard` queue. No order between jobs of one key.
 * - the same guarantees as ours: a `key_strict_fifo` queue, every job's `singletonKey` the same key
 *   as our message's (unique per message, time-ordered, as a booking's events are keyed): a job of
 *   a key waits while an earlier one of that key is active, in retry or failed. Completed jobs kept
 *   `deleteAfterSeconds` = our OUTBOX_RETENTION_DAYS. What both ways have: work() completes a batch
 *   fenced on the attempt it fetched (pg-boss 12's attempt fence: `id:retry_count` must match), so a
 *   worker whose claim lapsed cannot settle the newer attempt.
 */
export const PGBOSS_POLL_SECONDS = 0.5;

/** OUTBOX_RETENTION_DAYS's default (src/config.ts): the DONE history we keep, in seconds. */
export const RETENTION_SECONDS = 7 * 86_400;

/** "batch 5,000 × 1 loop" (", key_strict_fifo"): a configuration's label in logs and the report. */
export const pgBossLabel = (c: PgBossConfig) =>
  `batch ${c.batchSize.toLocaleString('en-US')} × ${c.workers} loop${c.workers > 1 ? 's' : ''}${c.keyed ? ', key_strict_fifo per key' : ''}`;

/** The queue of a configuration: standard, or key_strict_fifo keeping completed jobs for the retention. */
export const queueOptions = (c: Pick<PgBossConfig, 'keyed'>): Omit<Queue, 'name'> =>
  c.keyed ? { policy: 'key_strict_fifo', notify: true, deleteAfterSeconds: RETENTION_SECONDS } : { policy: 'standard', notify: true };

/** One job as the configuration sends it: keyed ones carry their message's key, time-ordered as ours are (ADR 0018). */
export const jobOf = (c: Pick<PgBossConfig, 'keyed'>, data: object) => (c.keyed ? { data, singletonKey: uuidV7() } : { data });

/** One work() with `cfg.workers` local fetch loops on `name`, each fetching up to `cfg.batchSize` jobs. */
export async function workAll(boss: PgBoss, name: string, cfg: PgBossConfig, pollSeconds: number, handler: () => Promise<void>) {
  await boss.work(
    name,
    {
      batchSize: cfg.batchSize,
      localConcurrency: cfg.workers,
      pollingIntervalSeconds: pollSeconds,
      notifyPollingIntervalSeconds: pollSeconds,
      burstWhenBatchFull: cfg.batchSize > 1,
    },
    handler,
  );
}

export async function startBoss(url: string): Promise<PgBoss> {
  const boss = new PgBoss({ connectionString: url, max: 10, supervise: false, schedule: false, useListenNotify: true });
  boss.on('error', (err: unknown) => console.error('pg-boss error:', err));
  await boss.start();
  return boss;
}

export async function setupPgBoss(url: string): Promise<void> {
  const boss = await startBoss(url); // installs its schema
  await boss.stop({ graceful: false });
}

export async function pgBossDrain(url: string, jobs: number, run: number, cfg: PgBossConfig) {
  const boss = await startBoss(url);
  const name = `drain_${run}_${Date.now()}`;
  await boss.createQueue(name, queueOptions(cfg));
  for (let i = 0; i < jobs; i += 5000) {
    await boss.insert(
      name,
      Array.from({ length: Math.min(5000, jobs - i) }, (_, k) => jobOf(cfg, { i: i + k })),
    );
  }
  await withClient(url, (c) => c.query('analyze pgboss.job'));
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
    await boss.stop({ graceful: false });
  }
}

/**
 * pg-boss as the latency section runs it: one job at a time (batch 1), woken by LISTEN/NOTIFY as
 * pg-boss 12 can be, the poll at its minimum behind it; `keyed`: the same-guarantee queue
 * (key_strict_fifo, a key per job). `insert` is pg-boss's own send(), run on the caller's
 * transaction through its `db` option. The latency section's and the held snapshot's.
 */
export async function startPgBossLatencyWorker(url: string, keyed: boolean, arrived: (id: number) => void) {
  const boss = await startBoss(url);
  const name = `latency_${Date.now()}`;
  await boss.createQueue(name, queueOptions({ keyed }));
  await boss.work(
    name,
    { batchSize: 1, pollingIntervalSeconds: PGBOSS_POLL_SECONDS, notifyPollingIntervalSeconds: PGBOSS_POLL_SECONDS },
    async ([job]) => arrived((job!.data as { id: number }).id),
  );
  return {
    async insert(client: pg.Client, id: number) {
      const job = jobOf({ keyed }, { id });
      await boss.send(name, job.data, {
        ...('singletonKey' in job ? { singletonKey: job.singletonKey } : {}),
        db: { executeSql: (text: string, values?: unknown[]) => client.query(text, values) },
      });
    },
    stop: () => boss.stop({ graceful: false }),
  };
}

/** Commit → handler through the worker above, one sample at a time. */
export async function pgBossLatency(url: string, samples: number, keyed = false) {
  const probe = new LatencyProbe();
  const worker = await startPgBossLatencyWorker(url, keyed, (id) => probe.arrived(id));
  try {
    return await probe.run({
      url,
      samples,
      insert: (client, id) => worker.insert(client, id),
      // A pause drawn over the whole polling interval: should a notification be missed, the samples
      // land anywhere in the poll cycle rather than always at the same point of it.
      pauseMs: () => Math.random() * PGBOSS_POLL_SECONDS * 1000,
      timeoutMs: 30_000,
    });
  } finally {
    await worker.stop();
  }
}
