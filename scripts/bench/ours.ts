import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import pino from 'pino';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import { HandlerRegistry, type Handler } from '../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../src/worker/outbox-worker.ts';
import { LatencyProbe } from './lib/latency.ts';
import { assertOk, entryArgs, runParallel, runProcess } from '../lib/processes.ts';
import { markDir } from './lib/marks.ts';
import {
  analyzeOutbox,
  claimOn,
  connectClaimClient,
  countNotDone,
  countPending,
  explainCachedClaim,
  fillBacklog,
  fillDoneHistory,
  fillWarmUp,
  insertOne,
} from './lib/outbox.ts';
import { PENDING, watchSettled } from './lib/settled.ts';
import { msSince } from './lib/stats.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { withClient } from '../lib/postgres.ts';

/**
 * Our worker. Drains run the real entry point as separate processes (scripts/bench/bench-worker.ts
 * is src/commands/drain-outbox.ts plus two bench handlers), `--until-empty`, timed like
 * graphile-worker's `--once` processes (lib/marks.ts). Latency runs the same loop in-process
 * (createConfiguredWorker, LISTEN/NOTIFY), like the peers'.
 */

/**
 * Messages as `enqueue` writes them (one row each, a unique key as a booking's events have, a
 * small JSON payload), but in one statement: they are all committed before the clock starts. The
 * key is time-ordered, as a new booking's id is (src/db/uuid-v7.ts, ADR 0018): the bench's messages
 * use the same function as every key here, so the figures show the index locality the product has.
 */
export async function fillOutbox(url: string, topic: string, count: number): Promise<void> {
  await withClient(url, async (c) => {
    await fillBacklog(c, topic, count);
    await analyzeOutbox(c, { vacuum: false });
  });
}

const workerEnv = (url: string, extra: Record<string, string> = {}) => ({
  DATABASE_URL: url,
  // Like graphile-worker's NO_LOG_SUCCESS in its perfTest: no log line per handled message.
  LOG_LEVEL: 'warn',
  MAIL_DIR: path.join(os.tmpdir(), 'stayhub-bench-mail'),
  ...extra,
});

function drainProcesses(url: string, processes: number, env: Record<string, string> = {}) {
  const args = entryArgs('scripts/bench/bench-worker.ts', '--until-empty');
  return runParallel(processes, () => runProcess(process.execPath, args, { env: workerEnv(url, env), timeoutMs: 600_000 }));
}

/**
 * Drains `count` messages of `topic` with `processes` worker processes started together, on a
 * fresh migrated database (so DONE rows of earlier runs never weigh on a later one). The clock
 * runs from the first handler entered in any process (lib/marks.ts) to the moment nothing is
 * PENDING (lib/settled.ts): the same start and end as every other system's. `onStarted` is called
 * when the clock starts (the first mark seen, polled every 5 ms): what runs beside a drain starts
 * with it, not during the processes' start-up.
 */
export async function oursDrain(
  url: string,
  opts: {
    topic: string;
    count: number;
    processes: number;
    env?: Record<string, string>;
    onStarted?: () => void;
    /** After the messages are written, before the workers start (tracing.ts stores their trace context). */
    beforeStart?: () => Promise<void>;
  },
) {
  await fillOutbox(url, opts.topic, opts.count);
  await opts.beforeStart?.();
  const marks = markDir();
  const watch = watchSettled(url, PENDING.ours);
  let ended = false;
  const onStarted = opts.onStarted;
  if (onStarted) {
    void (async () => {
      while (!ended && !marks.started()) await sleep(5);
      if (!ended) onStarted();
    })();
  }
  try {
    const exits = drainProcesses(url, opts.processes, { ...opts.env, BENCH_MARK_DIR: marks.dir });
    const settledAt = await Promise.race([watch.settled, exits.then((r) => (assertOk('bench-worker --until-empty', r), watch.settled))]);
    assertOk('bench-worker --until-empty', await exits);
    const drainMs = settledAt - marks.earliest();
    const left = await withClient(url, countNotDone);
    if (left !== 0) throw new Error(`our worker left ${left} messages not DONE`);
    return { perSecond: (opts.count * 1000) / drainMs, drainSeconds: drainMs / 1000 };
  } finally {
    ended = true;
    await watch.stop();
    marks.cleanup();
  }
}

/**
 * Our worker in-process at its default settings (LISTEN/NOTIFY), one handler of `bench.latency`
 * that passes each message's `{ id }` to `arrived`: the latency section's and the held snapshot's.
 * `insert` writes what enqueue() does in a producer with no other transaction carrying a wake-up
 * (each message alone): the row and its wake-up in one statement, delivered by the COMMIT
 * (src/outbox/wake-up.ts).
 */
export async function startOursInProcess(url: string, arrived: (id: number) => void) {
  const config = loadConfig({ DATABASE_URL: url, LOG_LEVEL: 'warn', MAIL_DIR: path.join(os.tmpdir(), 'stayhub-bench-mail') });
  const database = createDatabase(url, { max: config.WORKER_CONCURRENCY + 2, applicationName: 'bench-worker' });
  const handler: Handler<any> = {
    name: 'bench-latency',
    topic: 'bench.latency' as never,
    handle: async (ctx) => arrived((ctx.payload as { id: number }).id),
  };
  const worker = createConfiguredWorker({
    db: database.db,
    config,
    registry: new HandlerRegistry([handler]),
    logger: pino({ level: 'warn' }),
    housekeeping: false,
  });
  await worker.start();
  return {
    insert: (client: pg.Client, id: number) => insertOne(client, 'bench.latency', id, { wakeUp: true }),
    async stop() {
      await worker.stop();
      await database.close();
    },
  };
}

/** Commit → handler with our worker idle on LISTEN (in-process, default settings). */
export async function oursLatency(url: string, samples: number) {
  const probe = new LatencyProbe();
  const worker = await startOursInProcess(url, (id) => probe.arrived(id));
  try {
    // Warm-up, as graphile-worker's latency test does: connections open, code paths compiled.
    await withClient(url, async (c) => {
      await fillWarmUp(c, 'bench.latency', 100);
      for (let i = 0; i < 500; i++) {
        if ((await countPending(c)) === 0) break;
        await sleep(20);
      }
    });
    return await probe.run({ url, samples, insert: worker.insert });
  } finally {
    await worker.stop();
  }
}

/**
 * Claim cost against history. Two outboxes with the same `pending` PENDING rows; the second also
 * holds `done` DONE rows, older than every pending one, as the worker leaves them. Both are
 * VACUUM ANALYZEd, as autovacuum would have done for a table that grew this way.
 */
export async function prepareClaimTables(emptyUrl: string, historyUrl: string, pending: number, done: number) {
  for (const url of [emptyUrl, historyUrl]) {
    await withClient(url, async (c) => {
      if (url === historyUrl) {
        const monthAgo = new Date(Date.now() - 30 * 24 * 3600 * 1000);
        await fillDoneHistory(c, done, monthAgo, monthAgo);
      }
      await fillBacklog(c, 'bench.noop', pending);
      await analyzeOutbox(c, { vacuum: true });
    });
  }
}

/**
 * The times of `samples` claims (the worker's real claim, on a connection with its own settings
 * and cached plan), in milliseconds. Each runs in a transaction that is rolled back, so every
 * sample sees the same table; only the claim statement is timed, not the BEGIN/ROLLBACK.
 */
export async function claimTimes(url: string, samples: number, batch: number): Promise<number[]> {
  const client = await connectClaimClient({ connectionString: url, application_name: 'bench-claim' });
  try {
    const ms: number[] = [];
    for (let i = 0; i < samples + 5; i++) {
      await client.query('begin');
      const t = process.hrtime.bigint();
      const claimed = await claimOn(client, { limit: batch, leaseSeconds: 60, claimId: randomUUID() });
      const elapsed = msSince(t);
      await client.query('rollback');
      if (claimed.length !== batch) throw new Error(`claimed ${claimed.length}, expected ${batch}`);
      if (i >= 5) ms.push(elapsed); // the first few warm the cache
    }
    return ms;
  } finally {
    await client.end();
  }
}

/**
 * EXPLAIN (ANALYZE, BUFFERS) of the claim exactly as the worker runs it: the plan cached on a
 * connection with the claim's connection settings (src/outbox/claim-connection.ts), rolled back.
 */
export async function explainClaim(url: string, batch: number): Promise<string> {
  const client = await connectClaimClient({ connectionString: url, application_name: 'bench-claim-explain' });
  try {
    return await explainCachedClaim(client, { limit: batch, leaseSeconds: 60, claimId: randomUUID() }, { analyze: true, buffers: true });
  } finally {
    await client.end();
  }
}
