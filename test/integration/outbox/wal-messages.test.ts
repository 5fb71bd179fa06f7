import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction } from '../../../src/db/transaction.ts';
import { enqueueTopic } from '../../../src/messages/enqueue.ts';
import { ensureWalSlot, materialize, requireWalSlot, setOutboxWrites, walSlotState } from '../../../src/outbox/index.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { statsCommand } from '../../../src/commands/outbox-stats.ts';
import { HANDLER_CATALOGUE } from '../../../src/messages/catalogue.ts';
import { createApiMetrics } from '../../../src/metrics/api-metrics.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { logicalTestDatabase } from '../../helpers/logical-database.ts';
import { runInProcess } from '../../helpers/npm-run.ts';
import { waitFor } from '../../helpers/wait.ts';
import { recordingWorker } from '../../helpers/recording-worker.ts';

/*
 * OUTBOX_WRITES=wal (src/outbox/wal-messages.ts, migrations/0005): enqueue writes its message to the
 * WAL, and outbox_materialize makes the rows from a logical replication slot. What must hold is
 * what holds for rows written directly: a rollback writes nothing, a commit exactly one row, a key's
 * messages in the order written, a group's turns one apart, and nothing made twice when the slot is
 * read again after a crash (it only moves for rows already committed).
 */

let tdb: TestDatabase;
let slot: string;

beforeAll(async () => {
  tdb = await logicalTestDatabase('walmsg');
  slot = `stayhub_test_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  expect(await ensureWalSlot(tdb.url, slot)).toEqual({ made: true });
}, 60_000);
afterAll(async () => {
  setOutboxWrites('table');
  await tdb?.drop();
});
afterEach(() => setOutboxWrites('table'));

interface Row {
  id: string;
  public_id: string;
  topic: string;
  key: string | null;
  payload: { propertyId?: string; bookingId?: string };
  priority: number;
  group_id: string | null;
  owner_id: string | null;
  turn: string | null;
  status: string;
}
const rows = async () => (await tdb.pool.query<Row>('select * from outbox order by id')).rows;

/** Enqueues on the WAL path, in one transaction, messages of `group` for these property ids (returned). */
async function writeToWal(propertyIds: string[], opts: { group?: string; rollback?: boolean } = {}) {
  setOutboxWrites('wal');
  const written: string[] = [];
  await withTransaction(tdb.db, async (tx) => {
    for (const propertyId of propertyIds) {
      const m = await enqueueTopic(tx, 'property.changed', { propertyId, reason: 'updated' }, { key: propertyId, ...opts });
      expect(m).toEqual({ id: null, publicId: null, topic: 'property.changed' });
      written.push(propertyId);
    }
    if (opts.rollback) throw new Error('rolled back on purpose');
  }).catch((e: Error) => {
    if (!opts.rollback || e.message !== 'rolled back on purpose') throw e;
  });
  setOutboxWrites('table');
  return written;
}

/** The property ids of the rows, in the order of their ids. */
const written = async () => (await rows()).map((r) => r.payload.propertyId);

/** Materializes until a call makes nothing, keeping the slot's position as the worker does. */
let moveTo: string | null = null;
async function materializeAll(maxChanges?: number): Promise<number> {
  let made = 0;
  for (;;) {
    const r = await materialize(tdb.pool, slot, moveTo, maxChanges);
    moveTo = r.moveTo;
    made += r.made;
    if (r.made === 0) return made;
  }
}

describe('messages written to the WAL', () => {
  it('a commit makes exactly its rows, as written; a rollback makes none; ids follow commit order', async () => {
    await tdb.pool.query('delete from outbox');
    const group = `host-${randomUUID()}`;
    const a = [randomUUID(), randomUUID()];
    const b = [randomUUID()];
    const rolledBack = await writeToWal([randomUUID()], { group, rollback: true });
    const first = await writeToWal(a, { group });
    const second = await writeToWal(b, { group });
    // Nothing is a row until the worker reads the slot.
    expect(await rows()).toEqual([]);

    expect(await materializeAll()).toBe(3);
    const made = await rows();
    expect(made.map((r) => r.payload.propertyId)).toEqual([...first, ...second]);
    expect(made.map((r) => r.payload.propertyId)).not.toContain(rolledBack[0]);
    expect(made.every((r) => r.topic === 'property.changed' && r.status === 'PENDING' && r.group_id === group)).toBe(true);
    expect(made.map((r) => r.key)).toEqual([...a, ...b]);
    // A group's turns one apart, as outbox_turn gives them when each row sees the one before.
    expect(made.map((r) => Number(r.turn))).toEqual([0, 1, 2]);
    // The public id is the row's, as on the table path: its lookup finds the row.
    const looked = await tdb.pool.query('select outbox_public_id(created_at, id) = public_id as same from outbox');
    expect(looked.rows.every((r: { same: boolean }) => r.same)).toBe(true);
  });

  it('turns are the ones the table path gives the same messages, groups and owners interleaved', async () => {
    // Host h1, h2 and guests o1, o2, o3: each message's group and owner, in the order written.
    const pattern = [
      ['h1', 'o1'],
      ['h1', 'o2'],
      ['h2', 'o1'],
      ['h2', 'o2'],
      ['h1', 'o1'],
      ['h2', 'o3'],
      ['h1', 'o3'],
      ['h2', 'o1'],
    ];
    const turnsWritten = async (writes: 'table' | 'wal') => {
      await tdb.pool.query('delete from outbox');
      setOutboxWrites(writes);
      await withTransaction(tdb.db, async (tx) => {
        for (const [group, owner] of pattern) {
          await enqueueTopic(tx, 'booking.created', bookingPayload(), { group: group!, owner: owner! });
        }
      });
      setOutboxWrites('table');
      if (writes === 'wal') expect(await materializeAll()).toBe(pattern.length);
      return (await rows()).map((r) => Number(r.turn));
    };
    const table = await turnsWritten('table');
    expect(new Set(table).size).toBeGreaterThan(2); // the pattern does make turns differ
    expect(await turnsWritten('wal')).toEqual(table);
  });

  it('a slot read again (a crash before it moved) makes nothing twice; once moved, it is not read again', async () => {
    await tdb.pool.query('delete from outbox');
    const ids = await writeToWal([randomUUID(), randomUUID()]);
    const once = await materialize(tdb.pool, slot, moveTo);
    expect(once.made).toBe(2);
    // The worker died here, before any call moved the slot past these messages: the next one
    // starts without the position and reads them again. The position kept with the rows skips them.
    const behind = (await walSlotState(tdb.db, slot))!.behindBytes;
    const again = await materialize(tdb.pool, slot, null);
    expect(again.made).toBe(0);
    expect(await written()).toEqual(ids);
    // That call moved the slot to the recorded position: it is no longer behind them.
    expect((await walSlotState(tdb.db, slot))!.behindBytes).toBeLessThan(behind);
    moveTo = again.moveTo;
    const later = await writeToWal([randomUUID()]);
    expect(await materializeAll()).toBe(1);
    expect(await written()).toEqual([...ids, ...later]);
  });

  it("what a stream gives again (it started over from the slot's position) is skipped by the recorded position", async () => {
    await tdb.pool.query('delete from outbox');
    const [end] = (await tdb.pool.query<{ end: string }>('select (pg_current_wal_lsn() + 1000000)::text as end')).rows.map((r) => r.end);
    const message = {
      topic: 'property.changed',
      payload: { propertyId: randomUUID(), reason: 'updated' },
      key: null,
      priority: 0,
      group: null,
      owner: null,
      at: new Date().toISOString(),
    };
    const received = JSON.stringify([{ end, message }]);
    const make = async () =>
      (await tdb.pool.query<{ made: number }>('select outbox_make_rows($1, $2::json) as made', [slot, received])).rows[0]!.made;
    expect(await make()).toBe(1);
    expect(await make()).toBe(0);
    expect(await written()).toEqual([message.payload.propertyId]);
    // That position is past everything the slot holds: put it back, as the rows of this test were not from the slot.
    await tdb.pool.query('update outbox_wal_position set done_to = pg_current_wal_flush_lsn() where slot = $1', [slot]);
  });

  it('a read cut at max_changes keeps whole transactions: the rest come next, none twice', async () => {
    await tdb.pool.query('delete from outbox');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(...(await writeToWal([randomUUID(), randomUUID(), randomUUID()])));
    const first = await materialize(tdb.pool, slot, moveTo, 4);
    // At least the first transaction (begin, three messages, commit), never part of one.
    expect(first.made % 3).toBe(0);
    expect(first.made).toBeGreaterThan(0);
    expect(first.made).toBeLessThan(15);
    moveTo = first.moveTo;
    expect(await materializeAll(4)).toBe(15 - first.made);
    expect(await written()).toEqual(ids);
  });

  it('two workers reading at once: one reads the slot, the other returns at once, each message made once', async () => {
    await tdb.pool.query('delete from outbox');
    const ids = await writeToWal(Array.from({ length: 50 }, () => randomUUID()));
    const [x, y] = await Promise.all([materialize(tdb.pool, slot, moveTo), materialize(tdb.pool, slot, moveTo)]);
    expect(x.made + y.made).toBe(50);
    moveTo = (x.made ? x : y).moveTo;
    expect(await materializeAll()).toBe(0);
    expect(await written()).toEqual(ids);
  });

  it('skips messages of other prefixes on the same slot', async () => {
    await tdb.pool.query('delete from outbox');
    await tdb.pool.query(`select pg_logical_emit_message(true, 'someone.else', '{"id":"not ours"}')`);
    const ids = await writeToWal([randomUUID()]);
    expect(await materializeAll()).toBe(1);
    expect(await written()).toEqual(ids);
  });

  it('a worker with the slot handles what the API wrote to the WAL, in key order', async () => {
    await tdb.pool.query('delete from outbox');
    const { worker, handled } = recordingWorker(tdb, 'booking.created', 'bookingId', {
      OUTBOX_WRITES: 'wal',
      OUTBOX_SLOT: slot,
      POLL_INTERVAL_MS: '60000',
    });
    await worker.start();
    try {
      const bookings = Array.from({ length: 5 }, () => bookingPayload());
      setOutboxWrites('wal');
      for (const b of bookings) {
        // One key for all: each waits for the one before, so the order handled is the order written.
        await withTransaction(tdb.db, (tx) => enqueueTopic(tx, 'booking.created', b, { key: 'one-key' }));
      }
      setOutboxWrites('table');
      // The poll is a minute away: only the writers' notifications can have started these claims.
      await waitFor(async () => handled.length === 5, 20_000, 'the five bookings handled');
      expect(handled).toEqual(bookings.map((b) => b.bookingId));
      expect((await rows()).every((r) => r.status === 'DONE')).toBe(true);
    } finally {
      await worker.stop();
    }
  });

  it("a running worker streams the slot: its stream cut, it reads again from the slot's position, nothing lost or made twice", async () => {
    await tdb.pool.query('delete from outbox');
    const { worker, handled } = recordingWorker(tdb, 'property.changed', 'propertyId', {
      OUTBOX_WRITES: 'wal',
      OUTBOX_SLOT: slot,
      POLL_INTERVAL_MS: '60000',
    });
    await worker.start();
    try {
      const streaming = async () =>
        (await tdb.pool.query('select active from pg_replication_slots where slot_name = $1', [slot])).rows[0]?.active === true;
      await waitFor(streaming, 10_000, 'the worker streaming the slot');
      const first = [];
      for (let i = 0; i < 10; i++) first.push(...(await writeToWal([randomUUID(), randomUUID()])));
      await waitFor(async () => handled.length >= first.length, 10_000, 'the first messages handled');
      // The stream cut from the server's side, while more messages commit.
      await tdb.pool.query('select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = $1', [slot]);
      const second = [];
      for (let i = 0; i < 10; i++) second.push(...(await writeToWal([randomUUID(), randomUUID()])));
      await waitFor(async () => handled.length >= first.length + second.length, 20_000, 'every message handled');
      await new Promise((r) => setTimeout(r, 300));
      expect(handled.sort()).toEqual([...first, ...second].sort());
      expect(await written()).toEqual([...first, ...second]);
    } finally {
      await worker.stop();
    }
    // Everything read was written: the slot's reader made the rows, and a reader by statement finds nothing.
    expect((await materialize(tdb.pool, slot, null)).made).toBe(0);
  });

  it('outbox:stats says how far behind the slot is, and when it is missing', async () => {
    const env = { ...process.env, DATABASE_URL: tdb.url, LOG_LEVEL: 'warn', OUTBOX_WRITES: 'wal' };
    await writeToWal([randomUUID()]);
    const r = await runInProcess(statsCommand, [], { ...env, OUTBOX_SLOT: slot });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`replication slot ${slot}: [\\d.]+ (KiB|MiB) of WAL not yet read by the worker \\(wal_status reserved\\)`),
    );
    const json = await runInProcess(statsCommand, ['--json'], { ...env, OUTBOX_SLOT: slot });
    expect(JSON.parse(json.stdout).walSlot).toEqual({ name: slot, behindBytes: expect.any(Number), walStatus: 'reserved' });
    const missing = await runInProcess(statsCommand, [], { ...env, OUTBOX_SLOT: 'stayhub_no_such_slot' });
    expect(missing.stdout).toMatch(/replication slot stayhub_no_such_slot: missing/);
    expect(await materializeAll()).toBe(1);
  });

  it("the API's metrics carry the slot's lag, and say when it is missing", async () => {
    const scrape = async (walSlot: string) => {
      const metrics = createApiMetrics({ db: tdb.db, catalogue: HANDLER_CATALOGUE, walSlot, outboxCacheMs: 0 });
      const text = await metrics.registry.metrics();
      const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
      return { missing: value('stayhub_outbox_wal_slot_missing'), behind: value('stayhub_outbox_wal_behind_bytes') };
    };
    await writeToWal([randomUUID()]);
    const here = await scrape(slot);
    expect(here.missing).toBe(0);
    expect(here.behind).toBeGreaterThan(0);
    const gone = await scrape('stayhub_no_such_slot');
    expect(gone.missing).toBe(1);
    expect(gone.behind).toBe(0); // nothing to be behind: the missing gauge says why
    expect(await materializeAll()).toBe(1);
  });

  it('the API refuses to write to the WAL without its slot', async () => {
    await expect(requireWalSlot(tdb.db, 'stayhub_no_such_slot')).rejects.toThrow(/no replication slot stayhub_no_such_slot/);
    await expect(requireWalSlot(tdb.db, slot)).resolves.toBeUndefined();
  });
});
