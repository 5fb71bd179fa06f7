import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { withTransaction } from '../../../src/db/transaction.ts';
import { HandlerRegistry } from '../../../src/outbox/index.ts';
import {
  CLAIM_SQL,
  type ClaimedMessage,
  ClaimConnection,
  connectClaimClient,
  explainClaim,
  markDoneMany,
  scheduleRetry,
} from '../../../src/outbox/testing.ts';
import { enqueueTopic } from '../../../src/messages/enqueue.ts';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { claimTestDatabase } from '../../helpers/claim-fixture.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { insertMessages } from '../../helpers/outbox-rows.ts';
import { testHandler } from '../../helpers/test-handler.ts';
import { sleep } from '../../helpers/wait.ts';

/*
 * The claim's order (ADR 0033, 0039): priorities per topic, turns between groups and between
 * owners, and per-key order held whatever that order is. Messages are written by the real enqueue
 * (their priority from TOPIC_PRIORITY, their turn from outbox_turn) and claimed by the worker's
 * claim statement. The claims run with a lock_timeout (the test database's): a claim that waited
 * for another claim's row locks instead of skipping them fails with a lock-timeout error.
 *
 * Slow (about 25 s alone): two of its rules are about floods (2,400 groups, 1,000 bulk messages),
 * which only show at their size.
 */

let tdb: TestDatabase;
let claimer: ClaimConnection;
claimTestDatabase('fairorder', 5_000, (f) => ({ tdb, claimer } = f));

const claim = (limit: number) => claimer.claimBatch({ limit, leaseSeconds: 60, claimId: randomUUID() });
const done = (batch: readonly ClaimedMessage[]) =>
  markDoneMany(
    tdb.db,
    batch.map((m) => ({ id: m.id, claimId: m.claimId, lastHandler: null, createdAtMs: m.createdAtMs })),
  );

/** `count` property changes of `group`'s, written as a bulk edit does: `perTransaction` to a transaction. */
async function propertyChanges(group: string, count: number, perTransaction = 100): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += perTransaction) {
    await withTransaction(tdb.db, async (tx) => {
      for (let j = i; j < Math.min(count, i + perTransaction); j++) {
        const propertyId = randomUUID();
        ids.push((await enqueueTopic(tx, 'property.changed', { propertyId, reason: 'updated' }, { key: propertyId, group })).publicId!);
      }
    });
  }
  return ids;
}

async function bookingCreated(group: string, owner?: string): Promise<string> {
  const payload = bookingPayload();
  return withTransaction(
    tdb.db,
    async (tx) => (await enqueueTopic(tx, 'booking.created', payload, { key: payload.bookingId, group, owner })).publicId!,
  );
}

/** `count` confirmations of `owner`'s, each for a host of its own (a group of one message), `perTransaction` to a transaction. */
async function bookingsAcrossHosts(owner: string, count: number, perTransaction = 100): Promise<Set<string>> {
  const ids = new Set<string>();
  for (let i = 0; i < count; i += perTransaction) {
    await withTransaction(tdb.db, async (tx) => {
      for (let j = i; j < Math.min(count, i + perTransaction); j++) {
        const payload = bookingPayload();
        ids.add(
          (await enqueueTopic(tx, 'booking.created', payload, { key: payload.bookingId, group: `${owner}-host-${j}`, owner })).publicId!,
        );
      }
    });
  }
  return ids;
}

describe('priorities', () => {
  it('handles confirmations written after 1,000 bulk messages of their host before most of them', async () => {
    // One host: turns cannot help here, only the topics' priorities can. Its 200 confirmations have
    // turns 0 to 199 among the confirmations, and the bulk turns 0 to 999 among the bulk: by turn
    // alone they would interleave, by age they would all come last.
    await propertyChanges('host-a', 1000);
    const confirmations: string[] = [];
    for (let i = 0; i < 200; i++) confirmations.push(await bookingCreated('host-a'));

    const handled: string[] = [];
    const record = async (ctx: { messageId: string }) => void handled.push(ctx.messageId);
    const { logger } = captureLogger('warn');
    const w = createConfiguredWorker({
      db: tdb.db,
      config: workerConfig(tdb, { WORKER_CONCURRENCY: '1', LOG_LEVEL: 'warn' }),
      registry: new HandlerRegistry([
        testHandler('test.index', 'property.changed', record),
        testHandler('test.email', 'booking.created', record),
      ]),
      logger,
      listen: false,
      housekeeping: false,
    });
    expect(await w.runUntilEmpty()).toBe(1200);

    expect(handled).toHaveLength(1200);
    // Each is handled before at least 900 of the bulk messages (here, before all of them).
    const last = Math.max(...confirmations.map((id) => handled.indexOf(id)));
    expect(last - (confirmations.length - 1)).toBeLessThanOrEqual(100);
    expect(handled.slice(0, 200).sort()).toEqual([...confirmations].sort());
  });
});

describe('turns between groups', () => {
  it("claims another host's messages between a flood's, one turn each, however large the flood", async () => {
    const flood = new Set(await propertyChanges('host-a', 1000));
    const quiet: string[] = [];
    for (let i = 0; i < 10; i++) quiet.push(...(await propertyChanges('host-b', 1)));

    // The bound: no quiet message waits for more than one flood message per quiet message ahead of
    // it (and the one at the head). All ten come in the first claim of 20, where plain FIFO would
    // put them after the thousand.
    const first = await claim(20);
    const order = first.map((m) => m.publicId);
    expect(order.filter((id) => !flood.has(id))).toEqual(quiet);
    quiet.forEach((id, i) => expect(order.indexOf(id)).toBeLessThanOrEqual(2 * i + 1));
  });

  it('starts a group that floods later at the head: it shares the worker with the first flood, not ahead of all of it', async () => {
    const a = new Set(await propertyChanges('host-a', 600));
    // Half of A's flood is handled before C's arrives.
    for (let left = 300; left > 0;) {
      const batch = await claim(Math.min(100, left));
      await done(batch);
      left -= batch.length;
    }
    await propertyChanges('host-c', 300);

    const next = await claim(100);
    const fromA = next.filter((m) => a.has(m.publicId)).length;
    // Turns alternate from the head (A's 300th turn): 50 each. Without the head, C's turns would
    // start at 0 and all 100 would be C's.
    expect(fromA).toBeGreaterThanOrEqual(45);
    expect(next.length - fromA).toBeGreaterThanOrEqual(45);
  });

  it('claims a message that failed by its backoff deadline, ahead of a flood of first deliveries', async () => {
    const failed = await bookingCreated('host-b');
    const [m] = await claim(1);
    expect(m!.publicId).toBe(failed);
    expect(await scheduleRetry(tdb.db, m!.id, m!.claimId, 0, 'test: smtp away')).toBe(true);
    const { rows } = await tdb.db.execute<{ turn: string | null }>(sql`select turn from outbox where id = ${m!.id}`);
    expect(rows[0]!.turn).toBeNull();

    // A flood of a higher priority than anything else written after the failure: the retry
    // still comes first, it is not left to wait for the flood.
    for (let i = 0; i < 300; i++) await bookingCreated(`host-${i % 3}`);
    const next = await claim(20);
    expect(next[0]!.publicId).toBe(failed);
  });

  it('walks the index of turns in its order and stops at the limit, from a plan made on an empty outbox', async () => {
    const c = await connectClaimClient({ connectionString: tdb.url });
    try {
      await c.query('analyze outbox');
      await explainClaim(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() }); // the plan is made here
      await c.query(
        `insert into outbox (topic, key, payload, priority, group_id, turn)
         select 'test.t', gen_random_uuid()::text, '{}', i % 2, 'g' || (i % 50), i / 50 from generate_series(1, 5000) i`,
      );
      const plan = await explainClaim(c, { limit: 500, leaseSeconds: 60, claimId: randomUUID() }, { analyze: true });
      const picking = plan.slice(plan.indexOf('CTE aged'), plan.indexOf('CTE claimed'));
      const walk = /Index Scan using outbox_\w+_priority_turn_id_idx on outbox_\w+ o_\d+ \(actual [^)]*rows=(\d+)/.exec(picking);
      expect(walk, picking).not.toBeNull();
      expect(Number(walk![1])).toBeGreaterThanOrEqual(500);
      expect(Number(walk![1])).toBeLessThan(1000); // of 5,000 pending
      expect(picking).not.toMatch(/Bitmap|Sort(?! Key)|Hash|Seq Scan|Join Filter|Materialize|Memoize/);
    } finally {
      await c.end();
    }
  });
});

describe('turns between owners', () => {
  it("claims a quiet owner's message in the next claim, after 2,400 single-message groups of one owner", async () => {
    const flood = await bookingsAcrossHosts('guest-flood', 2400);
    const quiet = await bookingCreated('host-quiet', 'guest-quiet');

    // Each flood message is the only one of its group: by groups alone all 2,400 and the quiet one
    // shared the head's turn, and the quiet one, written last, came last.
    const { rows } = await tdb.db.execute<{ turns: number }>(
      sql`select count(distinct turn)::int as turns from outbox where group_id like 'guest-flood-host-%'`,
    );
    expect(rows[0]!.turns).toBe(2400);
    const first = await claim(20);
    expect(first.map((m) => m.publicId)).toContain(quiet);
    expect(first.filter((m) => flood.has(m.publicId))).toHaveLength(19);
  });

  it("a group's messages stay one turn apart whoever owns them, and a group names its own owner by default", async () => {
    // One host booked by 300 guests: the group spaces them out, as before owners.
    for (let i = 0; i < 300; i++) await bookingCreated('host-popular', `guest-${i}`);
    const other = await bookingCreated('host-other', 'guest-other');
    expect((await claim(10)).map((m) => m.publicId)).toContain(other);

    // Without an owner, the group is the owner.
    await propertyChanges('host-edits', 1);
    const { rows } = await tdb.db.execute<{ owner_id: string | null }>(sql`select owner_id from outbox where group_id = 'host-edits'`);
    expect(rows).toEqual([{ owner_id: 'host-edits' }]);
  });

  it("hands a quiet owner's confirmations to the real worker within 2 s of their commit, beside 2,400 single-message groups of one owner", async () => {
    const HANDLER_MS = 25; // 8 slots: about 320 a second, so the flood alone takes 7 s or more
    const QUIET = 30;
    await bookingsAcrossHosts('guest-flood', 2400);

    const { logger } = captureLogger('warn');
    const w = createConfiguredWorker({
      db: tdb.db,
      config: workerConfig(tdb, { WORKER_CONCURRENCY: '8', LOG_LEVEL: 'warn' }),
      registry: new HandlerRegistry([testHandler('test.email', 'booking.created', () => sleep(HANDLER_MS))]),
      logger,
      listen: false,
      housekeeping: false,
    });
    const drained = w.runUntilEmpty();
    try {
      // A quiet host's guest books now and then while the flood drains.
      for (let i = 0; i < QUIET; i++) {
        await bookingCreated('host-quiet', 'guest-quiet');
        await sleep(80);
      }
      // The flood was still far from drained when the last one was written: otherwise this proves nothing.
      const { rows: left } = await tdb.db.execute<{ n: number }>(
        sql`select count(*)::int as n from outbox where group_id like 'guest-flood-host-%' and status = 'PENDING'`,
      );
      expect(left[0]!.n).toBeGreaterThanOrEqual(400);
    } finally {
      expect(await drained).toBe(2400 + QUIET);
    }

    // Commit → DONE on the database's clock (created_at is the one-statement transaction's start).
    const { rows } = await tdb.db.execute<{ s: number }>(
      sql`select extract(epoch from processed_at - created_at)::float8 as s from outbox where group_id = 'host-quiet' and status = 'DONE' order by s`,
    );
    const waits = rows.map((r) => r.s);
    expect(waits).toHaveLength(QUIET);
    const p99 = waits[Math.ceil(0.99 * waits.length) - 1]!;
    expect(p99, `quiet owner's waits (s): ${waits.map((x) => x.toFixed(2)).join(' ')}`).toBeLessThanOrEqual(2);
  });
});

describe('claims side by side', () => {
  /*
   * A claim in progress holds its rows locked until it commits. Another claim steps over them
   * (SKIP LOCKED) and takes the next ones; without it, the second claim waits for the first one's
   * transaction, and a second worker adds nothing while the first claims. Both walks, each on rows
   * only it reads: messages with a turn (first deliveries) and messages without one.
   */
  for (const walk of ['turns', 'aged'] as const) {
    it(`takes the next rows of the ${walk} walk while another claim holds the first ones, without waiting for it`, async () => {
      const ids =
        walk === 'turns'
          ? [...(await propertyChanges('host-a', 10, 10))]
          : (
              await insertMessages(
                tdb.db,
                Array.from({ length: 10 }, () => ({ topic: 'property.changed' })),
              )
            ).map((r) => r.public_id);
      const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where turn is not null`);
      expect(rows[0]!.n).toBe(walk === 'turns' ? 10 : 0);

      const first = new pg.Client({ connectionString: tdb.url });
      await first.connect();
      try {
        await first.query('begin');
        // The first claim, frozen before its commit: it holds five rows.
        const held = await first.query<{ public_id: string }>({ text: CLAIM_SQL, values: [5, randomUUID(), 60, '{}'] });
        expect(held.rows).toHaveLength(5);

        // Waiting is what the lock_timeout catches (a claim that waited would be cancelled), not a stopwatch.
        const second = await claim(10);
        expect(second.map((m) => m.publicId).sort()).toEqual(ids.filter((id) => !held.rows.some((r) => r.public_id === id)).sort());
      } finally {
        await first.query('rollback');
        await first.end();
      }
    });
  }
});

describe('per-key order under the new order', () => {
  /*
   * Any mix of keys, groups, owners and priorities, written between claims, claimed in batches, each
   * claimed message then handled (DONE), failed (retried at once) or lost with its worker (its
   * lease ends): a key's messages are handled in the order they were written, and never two of a
   * key at once.
   */
  type Step =
    | { kind: 'write'; key: number | null; group: number | null; owner: number | null; priority: number }
    | { kind: 'claim'; limit: number }
    | { kind: 'settle'; pick: number; how: 'done' | 'retry' | 'lost' };
  const step: fc.Arbitrary<Step> = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.record({
        kind: fc.constant('write' as const),
        key: fc.option(fc.integer({ min: 0, max: 3 })),
        group: fc.option(fc.integer({ min: 0, max: 2 })),
        owner: fc.option(fc.integer({ min: 0, max: 2 })),
        priority: fc.integer({ min: 0, max: 2 }),
      }),
    },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('claim' as const), limit: fc.integer({ min: 1, max: 6 }) }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('settle' as const),
        pick: fc.nat(),
        how: fc.constantFrom('done' as const, 'done' as const, 'retry' as const, 'lost' as const),
      }),
    },
  );

  it('holds: a key is handled in writing order, one message at a time', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 5, maxLength: 60 }), async (steps) => {
        await tdb.db.execute(sql`truncate outbox`);
        const held = new Map<number, ClaimedMessage>();
        const handled: { id: number; key: string }[] = [];
        const take = (batch: ClaimedMessage[]) => {
          for (const m of batch) {
            if (m.key !== null) {
              const twin = [...held.values()].find((h) => h.key === m.key);
              expect(twin, `two messages of key ${m.key} in flight`).toBeUndefined();
            }
            held.set(m.id, m);
          }
        };
        const handle = async (m: ClaimedMessage) => {
          held.delete(m.id);
          expect(await done([m])).toEqual([true]);
          if (m.key !== null) handled.push({ id: m.id, key: m.key });
        };
        for (const s of steps) {
          if (s.kind === 'write') {
            // enqueue's INSERT, for topics of any priority; without an owner, as the previous
            // release's API writes it during a rollout (outbox_turn(group, priority)).
            const key = s.key === null ? null : `k${s.key}`;
            const group = s.group === null ? null : `g${s.group}`;
            const owner = s.owner === null ? null : `o${s.owner}`;
            await tdb.db.execute(
              owner === null
                ? sql`
                  insert into outbox (topic, payload, key, priority, group_id, turn)
                  values ('test.t', '{}', ${key}, ${s.priority}, ${group}, outbox_turn(${group}::text, ${s.priority}::int))`
                : sql`
                  insert into outbox (topic, payload, key, priority, group_id, owner_id, turn)
                  values ('test.t', '{}', ${key}, ${s.priority}, ${group}, ${owner},
                          outbox_turn(${group}::text, ${owner}::text, ${s.priority}::int))`,
            );
          } else if (s.kind === 'claim') {
            take(await claim(s.limit));
          } else if (held.size > 0) {
            const m = [...held.values()][s.pick % held.size]!;
            if (s.how === 'done') {
              await handle(m);
            } else if (s.how === 'retry') {
              held.delete(m.id);
              expect(await scheduleRetry(tdb.db, m.id, m.claimId, 0, 'test: failed')).toBe(true);
            } else {
              // Its worker is gone: the lease ends, and the message is due again.
              held.delete(m.id);
              await tdb.db.execute(sql`update outbox set leased_until = now() - interval '1 second' where id = ${m.id}`);
            }
          }
        }
        // Then everything is handled.
        for (let rounds = 0; rounds < 500; rounds++) {
          for (const m of [...held.values()]) await handle(m);
          const batch = await claim(10);
          if (batch.length === 0) break;
          take(batch);
        }
        const { rows } = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
        expect(rows[0]!.n).toBe(0);
        const byKey = new Map<string, number[]>();
        for (const h of handled) byKey.set(h.key, [...(byKey.get(h.key) ?? []), h.id]);
        for (const [key, ids] of byKey) expect(ids, `key ${key}`).toEqual([...ids].sort((x, y) => x - y));
      }),
      { numRuns: 40 },
    );
  });
});
