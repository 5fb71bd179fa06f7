import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createDatabase } from '../../src/db/client.ts';
import { LatencyProbe } from './lib/latency.ts';
import { nowMs } from './lib/marks.ts';
import { claimOn, connectClaimClient, insertOne, markDoneMany } from './lib/outbox.ts';
import { PENDING, watchSettled } from './lib/settled.ts';
import { fillOutbox } from './ours.ts';
import type { Drain } from './context.ts';

/*
 * The floors: the cost of the work itself, with no framework around it, measured beside us so a
 * ratio says how much of our time is ours.
 *
 * - drain floor: our claim statement (src/outbox/claim.ts, on a connection with the claim's session
 *   settings, as the worker sends it) and our DONE statement (src/outbox/settle.ts markDoneMany, the
 *   statement the worker's group commit sends) for the ids claimed, in a tight loop of bare `pg`
 *   calls: no handler, no dispatch, no lease bookkeeping. Per worker process it has what our worker
 *   has: one claim connection and one DONE write in flight (src/outbox/done-batch.ts), the next
 *   claim sent while the last batch is being marked DONE; the same batch size.
 * - latency floor: a bare LISTEN/NOTIFY round trip: an outbox row inserted and pg_notify called in
 *   one transaction, the clock from COMMIT sent to the notification received on another
 *   connection. What no worker woken by NOTIFY can beat on this server.
 *
 * The relay floor (a bare JetStream client) is in relay.ts, beside the relay.
 */

/**
 * Drains `count` no-op messages (committed before the clock starts, as ours.ts fillOutbox writes
 * them) with `lanes` claim/settle loops, each as a worker process of ours would run them: `batch`
 * messages a claim. The clock runs from the first claim that returned messages to nothing pending
 * (lib/settled.ts), the same end as every system's.
 */
export async function drainFloor(url: string, opts: { count: number; lanes: number; batch: number }): Promise<Drain> {
  await fillOutbox(url, 'bench.noop', opts.count);
  const watch = watchSettled(url, PENDING.ours);
  let firstMs: number | undefined;
  const lanes = await Promise.all(
    Array.from({ length: opts.lanes }, async () => ({
      claim: await connectClaimClient({ connectionString: url, application_name: 'bench-floor-claim' }),
      // The worker's DONE goes through its shared pool, one write in flight: a pool of one here.
      settle: createDatabase(url, { max: 1, applicationName: 'bench-floor-settle' }),
    })),
  );
  const lane = async ({ claim, settle }: (typeof lanes)[number]) => {
    let settling: Promise<unknown> = Promise.resolve();
    for (;;) {
      const claimed = await claimOn(claim, { limit: opts.batch, leaseSeconds: 60, claimId: randomUUID() });
      if (claimed.length === 0) break;
      firstMs ??= nowMs();
      await settling;
      const items = claimed.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: 'bench-noop', createdAtMs: m.createdAtMs }));
      settling = markDoneMany(settle.db, items).then((held) => {
        if (held.includes(false)) throw new Error('drain floor: a claim was not held at DONE');
      });
    }
    await settling;
  };
  try {
    await Promise.all(lanes.map(lane));
    const drainMs = (await watch.settled) - firstMs!;
    return { perSecond: (opts.count * 1000) / drainMs, drainSeconds: drainMs / 1000 };
  } finally {
    await watch.stop();
    await Promise.all(lanes.flatMap((l) => [l.claim.end(), l.settle.close()]));
  }
}

const FLOOR_CHANNEL = 'bench_latency_floor';

/**
 * `samples` round trips, each an outbox row and its pg_notify committed in one transaction, timed
 * by lib/latency.ts as every system's latency is (clock from COMMIT sent to the listener's
 * notification; 10 ms pause between samples). 20 unmeasured round trips first.
 */
export async function latencyFloor(url: string, samples: number) {
  let probe = new LatencyProbe();
  const listener = new pg.Client({ connectionString: url, application_name: 'bench-floor-listen' });
  await listener.connect();
  listener.on('notification', (n) => probe.arrived(Number(n.payload)));
  await listener.query(`listen ${FLOOR_CHANNEL}`);
  const insert = async (client: pg.Client, id: number) => {
    await insertOne(client, 'bench.latency', id, { wakeUp: false });
    await client.query(`select pg_notify('${FLOOR_CHANNEL}', $1::text)`, [String(id)]);
  };
  try {
    await probe.run({ url, samples: 20, insert });
    probe = new LatencyProbe();
    return await probe.run({ url, samples, insert });
  } finally {
    await listener.end();
  }
}
