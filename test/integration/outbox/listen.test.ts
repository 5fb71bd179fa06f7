import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import type { Logger } from '../../../src/logger.ts';
import { createDatabase } from '../../../src/db/client.ts';
import { withTransaction } from '../../../src/db/transaction.ts';
import { enqueueTopic } from '../../../src/messages/enqueue.ts';
import { purgeDone, HandlerRegistry } from '../../../src/outbox/index.ts';
import { ClaimConnection, handBack } from '../../../src/outbox/testing.ts';
import { layOutPastDays } from '../../helpers/outbox-partitions.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { waitFor } from '../../helpers/wait.ts';
import { recordStatements, type LoggedStatement } from '../../helpers/statement-log.ts';

/*
 * Wake-up by LISTEN/NOTIFY (with the fallback poll set to a minute, only the notification can
 * explain a pick-up by the first claim after the commit), the listener surviving its connection
 * being killed, and housekeeping.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('wlisten');
});
afterAll(async () => {
  await tdb?.drop();
});

async function enqueueBooking() {
  const payload = bookingPayload();
  await withTransaction(tdb.db, async (tx) => {
    await enqueueTopic(tx, 'booking.created', payload, { key: payload.bookingId });
  });
  return { payload };
}

/** The worker's claim queries (FOR UPDATE SKIP LOCKED), recognised in a statement log. */
const isClaim = (s: LoggedStatement) => /skip locked/i.test(s.text);
/** The claim of the messages its wake-ups named, by id (src/outbox/claim.ts claimIdsOn), not a walk. */
const isClaimByIds = (s: LoggedStatement) => /o\.id = any\(\$1::bigint\[\]\)/i.test(s.text);
/** The poll's walk of the messages without a turn alone (src/outbox/claim.ts CLAIM_AGED). */
const isClaimAged = (s: LoggedStatement) => /o\.turn is null/i.test(s.text) && !/turns as/i.test(s.text);

/**
 * A claim connection whose walks that find nothing take `ms` longer, as a snapshot held open makes
 * them take (src/outbox/runner/poll-walks.ts): the worker then spaces its full walks out.
 */
class DearWalks extends ClaimConnection {
  constructor(
    db: ConstructorParameters<typeof ClaimConnection>[0],
    opts: ConstructorParameters<typeof ClaimConnection>[1],
    private readonly ms: number,
  ) {
    super(db, opts);
  }

  override async claimBatch(opts: Parameters<ClaimConnection['claimBatch']>[0]) {
    const found = await super.claimBatch(opts);
    if (found.length === 0) await new Promise((r) => setTimeout(r, this.ms));
    return found;
  }
}

interface LoggedWorkerOptions {
  /** The fallback poll; a minute by default. */
  pollMs?: number;
  /** Each walk that finds nothing takes this much longer (DearWalks). */
  dearWalksMs?: number;
  /** Whether it LISTENs; it does by default. */
  listen?: boolean;
}

/**
 * A worker, its poll a minute away, on a pool of its own whose statements are logged (its claim
 * connection's too); it passes the booking id of each message it handles to `handled`.
 */
function loggedWorker(handled: (bookingId: string) => void, logger: Logger, opts: LoggedWorkerOptions = {}) {
  const traced = createDatabase(tdb.url, { max: 4, applicationName: 'stayhub-test-worker' });
  const log = recordStatements(traced.pool);
  const logged = { onOpen: (pool: Parameters<typeof log.attach>[0]) => log.attach(pool) };
  const worker = createConfiguredWorker({
    db: traced.db,
    claimConnection:
      opts.dearWalksMs === undefined ? new ClaimConnection(traced.db, logged) : new DearWalks(traced.db, logged, opts.dearWalksMs),
    config: workerConfig(tdb, { POLL_INTERVAL_MS: String(opts.pollMs ?? 60_000) }),
    ...(opts.listen === false ? { listen: false } : {}),
    registry: new HandlerRegistry([
      testHandler('record', 'booking.created', async ({ payload }) => handled((payload as { bookingId: string }).bookingId)),
    ]),
    logger,
    housekeeping: false,
  });
  return { log, worker, close: () => traced.close() };
}

describe('LISTEN/NOTIFY', () => {
  it('a committed message is claimed by the wake-up right after its commit although the poll interval is a minute, and again after the listener connection is killed', async () => {
    // The worker runs on a pool of its own whose statements are logged: the test waits until the
    // worker's last claim came back empty (the loop then sleeps for a minute) before it commits,
    // and reads which claim picked the message up. No sleeps, no wall-clock bounds.
    const handled = new Set<string>();
    const entries: Record<string, unknown>[] = [];
    let reconnectedAt: number | undefined;
    let mark = () => 0;
    const logger = pino(
      { level: 'info' },
      {
        write(line: string) {
          const entry = JSON.parse(line) as Record<string, unknown>;
          entries.push(entry);
          // Logged just before the listener wakes the loop for a catch-up claim.
          if (entry.msg === 'listener reconnected') reconnectedAt = mark();
        },
      },
    );
    const { log, worker, close } = loggedWorker((id) => handled.add(id), logger);
    mark = () => log.mark();
    /** The worker is asleep: its last claim since `after` came back empty and nothing is running. */
    const asleepAfter = (after: number) => () =>
      waitFor(
        async () => {
          const claims = log.statements.filter((s) => isClaim(s) && s.startSeq > after);
          const last = claims.at(-1);
          return last !== undefined && last.endSeq !== undefined && last.rowCount === 0 && log.inFlight() === 0;
        },
        20_000,
        'the worker to sleep after an empty claim',
      );
    /** Commits a message, and checks the very next claim took it: the wake-up, not a poll. */
    const commitAndSeeItWoken = async () => {
      const before = log.mark();
      const { payload } = await enqueueBooking();
      // Well inside the one-minute poll interval: only the notification can explain it.
      await waitFor(async () => handled.has(payload.bookingId), 20_000, 'the message handled');
      const next = log.statements.find((s) => isClaim(s) && s.startSeq > before);
      expect(next?.rowCount, 'the first claim after the commit took the message').toBe(1);
    };
    try {
      await worker.start();
      await asleepAfter(0)();
      await commitAndSeeItWoken();

      // The database kills the listener's session (as on a restart or failover).
      const { rows } = await tdb.db.execute<{ pid: number }>(
        sql`select pid from pg_stat_activity where datname = current_database() and application_name = 'stayhub-worker-listen'`,
      );
      expect(rows).toHaveLength(1);
      await tdb.db.execute(sql`select pg_terminate_backend(${rows[0]!.pid})`);
      // Reconnected: a new session has run its LISTEN, and the catch-up claim that follows came back empty.
      await waitFor(
        async () => {
          const r = await tdb.db.execute<{ pid: number; state: string; query: string }>(
            sql`select pid, state, query from pg_stat_activity where datname = current_database() and application_name = 'stayhub-worker-listen'`,
          );
          return r.rows.length === 1 && r.rows[0]!.pid !== rows[0]!.pid && r.rows[0]!.state === 'idle' && /^listen/i.test(r.rows[0]!.query);
        },
        30_000,
        'listener to reconnect',
      );
      await waitFor(async () => reconnectedAt, 30_000, 'the reconnection logged');
      await asleepAfter(reconnectedAt!)();

      await commitAndSeeItWoken();
      expect(entries.some((e) => e.msg === 'listener connection lost; reconnecting')).toBe(true);
    } finally {
      await worker.stop();
      await close();
    }
  });

  it('a rolled-back enqueue wakes nobody and leaves nothing', async () => {
    await expect(
      withTransaction(tdb.db, async (tx) => {
        await enqueueTopic(tx, 'booking.created', bookingPayload());
        throw new Error('rollback');
      }),
    ).rejects.toThrow('rollback');
    const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status = 'PENDING'`);
    expect(rows[0]!.n).toBe(0);
  });
});

describe("an idle worker's claims", () => {
  /** The worker's probe for a later message of the keys it just settled (src/outbox/claim.ts laterOfKeys). */
  const isProbe = (s: LoggedStatement) => /e\.key = any\(/i.test(s.text) && !isClaim(s);

  /**
   * A logged worker started and asleep, and what it sent since a mark: each claim (a walk, or by
   * the ids its wake-ups named) with how many messages it took, and each probe.
   */
  async function idleWorker(handled: string[], opts: LoggedWorkerOptions = {}) {
    const { log, worker, close } = loggedWorker((id) => handled.push(id), pino({ level: 'silent' }), opts);
    await worker.start();
    const since = (mark: number) =>
      log.statements
        .filter((s) => s.startSeq > mark && (isClaim(s) || isProbe(s)))
        .map((s) =>
          isClaim(s)
            ? `${isClaimByIds(s) ? 'claim by id' : isClaimAged(s) ? 'claim aged' : 'claim'} ${s.rowCount ?? 'running'}`
            : `probe${s.endSeq === undefined ? ' running' : ''}`,
        );
    // Asleep: the first claim came back empty, and nothing is in flight.
    await waitFor(async () => since(0)[0] === 'claim 0' && log.inFlight() === 0, 20_000, 'the worker asleep');
    return {
      since,
      mark: () => log.mark(),
      async stop() {
        await worker.stop();
        await close();
      },
    };
  }

  it('a message alone costs one claim, by the id its wake-up named: the claim before took everything due, and settling it finds no later message of its key', async () => {
    const handled: string[] = [];
    const w = await idleWorker(handled);
    try {
      const mark = w.mark();
      const { payload } = await enqueueBooking();
      await waitFor(async () => w.since(mark).includes('probe'), 20_000, 'the settled key asked about');
      expect(handled).toEqual([payload.bookingId]);
      // Nothing woke it since: a claim now would be one walk of the claim's indexes for nothing.
      await new Promise((r) => setTimeout(r, 300));
      expect(w.since(mark)).toEqual(['claim by id 1', 'probe']);
    } finally {
      await w.stop();
    }
  });

  it('the next message of a key is claimed as soon as the one before it is settled, though the poll is a minute away', async () => {
    const handled: string[] = [];
    const w = await idleWorker(handled);
    try {
      const key = randomUUID();
      const first = bookingPayload();
      const second = bookingPayload();
      const mark = w.mark();
      // One transaction, a wake-up naming each message: the claim of both ids takes the first, the
      // second waits for it; settling the first finds the second, and the walk takes it.
      await withTransaction(tdb.db, async (tx) => {
        await enqueueTopic(tx, 'booking.created', first, { key });
        await enqueueTopic(tx, 'booking.created', second, { key });
      });
      await waitFor(async () => handled.length === 2, 20_000, 'both messages handled');
      expect(handled).toEqual([first.bookingId, second.bookingId]);
      await waitFor(async () => w.since(mark).filter((s) => s === 'probe').length === 2, 20_000, 'the second settle asked about');
      expect(w.since(mark)).toEqual(['claim by id 1', 'probe', 'claim 1', 'probe']);
    } finally {
      await w.stop();
    }
  });

  it('a message made due by time is taken by the poll, though named messages keep the worker claiming by id', async () => {
    const handled: string[] = [];
    const w = await idleWorker(handled, { pollMs: 500 });
    let streaming = true;
    try {
      // A message not yet due (as a retry waits out its backoff), then one named message every 50 ms.
      const later = bookingPayload();
      await withTransaction(tdb.db, async (tx) => {
        const m = await enqueueTopic(tx, 'booking.created', later, { key: later.bookingId });
        await tx.execute(
          sql`update outbox set turn = null, available_at = now() + interval '300 milliseconds' where public_id = ${m.publicId}`,
        );
      });
      const stream = (async () => {
        const end = Date.now() + 4_000;
        while (Date.now() < end) {
          await enqueueBooking();
          await new Promise((r) => setTimeout(r, 50));
        }
        streaming = false;
      })();
      // Each named message resets nothing: the poll counts from the last walk, which takes it.
      await waitFor(async () => handled.includes(later.bookingId) || !streaming, 10_000, 'the message due by time');
      expect(handled, 'taken while named messages were still arriving').toContain(later.bookingId);
      await stream;
      expect(w.since(0).filter((c) => c.startsWith('claim by id')).length).toBeGreaterThan(10);
    } finally {
      streaming = false;
      await w.stop();
    }
  });

  it('while its walks are dear, the poll walks the messages without a turn alone between full walks, and takes a retry due by time there', async () => {
    const handled: string[] = [];
    // Its first three walks found nothing in 40 ms or more each: from the third on, the next full
    // walk is 20 s away at the soonest.
    const w = await idleWorker(handled, { pollMs: 100, dearWalksMs: 40 });
    try {
      await waitFor(async () => w.since(0).includes('claim aged 0'), 20_000, 'the first walk of the first index alone');
      const mark = w.mark();
      const retry = bookingPayload();
      await withTransaction(tdb.db, async (tx) => {
        const m = await enqueueTopic(tx, 'booking.created', retry, { key: retry.bookingId });
        // As a failed delivery waits out its backoff: no turn, due in 300 ms.
        await tx.execute(
          sql`update outbox set turn = null, available_at = now() + interval '300 milliseconds' where public_id = ${m.publicId}`,
        );
      });
      await waitFor(async () => handled.includes(retry.bookingId), 10_000, 'the retry');
      const claims = w.since(mark).filter((c) => c.startsWith('claim'));
      // Named but not yet due; then the polls' walks of the first index, the last of which took it.
      expect(claims[0]).toBe('claim by id 0');
      expect(claims.slice(1)).toContain('claim aged 1');
      expect(claims.slice(1).every((c) => c.startsWith('claim aged'))).toBe(true);
    } finally {
      await w.stop();
    }
  });

  it('while its walks are dear, a first delivery nobody was told about is taken by the next full walk, which the poll still makes', async () => {
    const handled: string[] = [];
    // Not listening: only the poll finds the message. Its first three walks found nothing in 4 ms
    // or more each, so the poll walks both indexes again 2 s after the third at the soonest, the
    // first index alone until then.
    const w = await idleWorker(handled, { pollMs: 100, dearWalksMs: 4, listen: false });
    try {
      await waitFor(async () => w.since(0).includes('claim aged 0'), 20_000, 'the first walk of the first index alone');
      const mark = w.mark();
      const { payload } = await enqueueBooking();
      await waitFor(async () => handled.includes(payload.bookingId), 40_000, 'the first delivery');
      const claims = w.since(mark).filter((c) => c.startsWith('claim'));
      const taking = claims.indexOf('claim 1');
      expect(taking, claims.join(', ')).toBeGreaterThan(5);
      expect(claims.slice(0, taking).every((c) => c === 'claim aged 0' || c === 'claim 0')).toBe(true);
      expect(claims.slice(0, taking).filter((c) => c === 'claim aged 0').length).toBeGreaterThan(5);
    } finally {
      await w.stop();
    }
  });

  it('a hand-back wakes the other workers, whose walk takes its messages at once, though the poll is a minute away and the lease as long', async () => {
    const handled: string[] = [];
    const w = await idleWorker(handled);
    try {
      const mark = w.mark();
      const payload = bookingPayload();
      const claimId = randomUUID();
      // Held by another worker's claim when it commits, as a prefetched message is before its hand-back.
      const id = await withTransaction(tdb.db, async (tx) => {
        const m = await enqueueTopic(tx, 'booking.created', payload, { key: payload.bookingId });
        const { rows } = await tx.execute<{ id: string }>(
          sql`update outbox set claim_id = ${claimId}, leased_until = now() + interval '60 seconds', attempts = 1
               where public_id = ${m.publicId} returning id`,
        );
        return Number(rows[0]!.id);
      });
      await waitFor(async () => w.since(mark).includes('claim by id 0'), 20_000, 'the named message found held');
      expect(await handBack(tdb.db, [{ id, claimId }])).toBe(1);
      await waitFor(async () => handled.includes(payload.bookingId), 20_000, 'the handed-back message');
      expect(w.since(mark).filter((c) => c.startsWith('claim'))).toEqual(['claim by id 0', 'claim 1']);
    } finally {
      await w.stop();
    }
  });
});

describe('housekeeping', () => {
  it("deletes a day's DONE rows in bounded batches when a DEAD letter keeps the day from going whole, and nothing else", async () => {
    await tdb.db.execute(sql`truncate outbox`);
    await layOutPastDays(tdb.pool, 12);
    // Nine days ago: 2,500 DONE rows past the retention, and a DEAD letter, which stays.
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at, created_at)
      select 't', '{}', 'DONE', now() - interval '8 days', now() - interval '9 days' from generate_series(1, 2500)`);
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at, created_at)
      values ('t', '{}', 'DEAD', now() - interval '8 days', now() - interval '9 days'),
             ('t', '{}', 'DONE', now() - interval '6 days', now() - interval '6 days'),
             ('t', '{}', 'DONE', now() - interval '8 days', now()),
             ('t', '{}', 'PENDING', null, now() - interval '9 days')`);
    const statements: number[] = [];
    // One batch at a time, to see that no statement deletes more than the batch size.
    for (;;) {
      const n = await purgeDone(tdb.db, { retentionDays: 7, batchSize: 1000, maxBatches: 1 });
      statements.push(n);
      if (n < 1000) break;
    }
    expect(statements).toEqual([1000, 1000, 500]);
    const { rows } = await tdb.db.execute<{ status: string; n: number }>(
      sql`select status, count(*)::int as n from outbox group by status order by status`,
    );
    // Left: the DEAD letter, the PENDING message, a row within the retention, and one past it
    // whose day (today) has not ended: its partition goes whole later.
    expect(rows).toEqual([
      { status: 'DEAD', n: 1 },
      { status: 'DONE', n: 2 },
      { status: 'PENDING', n: 1 },
    ]);
  });

  it('the running worker purges on its schedule, a whole day at a time', async () => {
    await tdb.db.execute(sql`truncate outbox`);
    await layOutPastDays(tdb.pool, 5);
    await tdb.db.execute(sql`
      insert into outbox (topic, payload, status, processed_at, created_at)
      select 't', '{}', 'DONE', now() - interval '2 days', now() - interval '3 days' from generate_series(1, 1500)`);
    await tdb.pool.query('analyze outbox'); // a dropped day's rows are counted from its statistics
    const day = (await tdb.pool.query(`select tableoid::regclass::text as name from outbox limit 1`)).rows[0].name;
    const { logger } = captureLogger();
    const worker = createConfiguredWorker({
      db: tdb.db,
      config: workerConfig(tdb, { OUTBOX_RETENTION_DAYS: '1' }),
      registry: new HandlerRegistry([]),
      logger,
      listen: false,
    });
    await worker.start();
    try {
      await waitFor(async () => worker.summary().purged === 1500, 30_000, 'purge');
    } finally {
      await worker.stop();
    }
    const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox`);
    expect(rows[0]!.n).toBe(0);
    expect((await tdb.pool.query(`select to_regclass($1) as t`, [day])).rows[0].t).toBeNull(); // dropped, not emptied
  });
});
