import { TransactionRollbackError } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { finishedPage, finishedPayloadValues, lastFinishedBefore, type FinishedMessage } from '../../../src/outbox/index.ts';
import { layOutPastDays, purgeDoneBatch } from '../../../src/outbox/testing.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { outboxPlansOf } from '../../helpers/statement-plans.ts';

/*
 * Finished messages without a B-tree over processed_at (ADR 0051): a BRIN index finds the pages of
 * a window, and what needs an order is read by day, in id order inside a day. The pages must still
 * hold every finished message once, the last one before a time must be the last, and no read may
 * scan the days' heaps: each statement's plan is logged by auto_explain (as notices to this test's
 * connection) with sequential scans forbidden, so a plan that still has one had no index to use.
 */

const tdb = useTestDatabase('finishedreads');
const HANDLER = 'relay';
const SPARSE = 'rarely';
const DAY = 86_400_000;
const HOUR = 3_600_000;
const today = Math.floor(Date.now() / DAY) * DAY;
const at = (ms: number) => new Date(ms).toISOString();

interface Row {
  id: number;
  created: number;
  processed: number;
  handlers: string[];
}
const rows: Row[] = [];

beforeAll(async () => {
  await layOutPastDays(tdb.pool, 12);
  // Created over twelve days (and before them, in the first partition), each processed within
  // minutes, but for a few that finished days later; a third not by the handler.
  const specs: { created: number; processed: number; late: boolean; handler?: string }[] = [];
  for (let d = 14; d >= 0; d--) {
    for (let i = 0; i < 6; i++) {
      const created = today - d * DAY + i * HOUR + 60_000;
      const late = d === 9 && i === 0 ? 5 * DAY : d === 3 && i === 1 ? 2 * DAY + 1_000 : 0;
      if (created + late + 60_000 < Date.now()) specs.push({ created, processed: created + 60_000 + late, late: late > 0 });
    }
  }
  // A handler that finished little: one message eleven days ago, and one of an older day that
  // finished after it, both more than a week before the time asked about below.
  const sparse = [
    { created: today - 11 * DAY + HOUR, processed: today - 11 * DAY + HOUR + 60_000, late: false, handler: SPARSE },
    { created: today - 12 * DAY + HOUR, processed: today - 9 * DAY - 12 * HOUR, late: true, handler: SPARSE },
  ];
  const handlersOf = (s: { late: boolean; handler?: string }, n: number): string[] =>
    s.handler ? [s.handler] : s.late || n % 3 !== 2 ? [HANDLER] : ['other'];
  for (const [n, s] of [...specs, ...sparse].entries()) {
    const handlers = handlersOf(s, n);
    const { rows: made } = await tdb.pool.query<{ id: string }>(
      `insert into outbox (topic, key, payload, status, attempts, processed_at, created_at, handlers_done)
       values ('thing.happened', 'k' || $1::int, jsonb_build_object('n', $1::int), 'DONE', 1, $2, $3, $4) returning id`,
      [n, at(s.processed), at(s.created), handlers],
    );
    rows.push({ id: Number(made[0]!.id), created: s.created, processed: s.processed, handlers });
  }
  await tdb.pool.query('vacuum analyze outbox');
});

const finishedIn = (since: number, until: number) =>
  rows.filter((r) => r.handlers.includes(HANDLER) && r.processed >= since && r.processed < until);

describe('finished messages read by day', () => {
  it('pages through a window by (day, id): every finished message once, in the order written inside a day', async () => {
    const since = today - 8 * DAY;
    const until = Date.now();
    const seen: FinishedMessage[] = [];
    for (let after: { day: string; id: number } | null = null; ;) {
      const page = await finishedPage(tdb.db, { handler: HANDLER, since: new Date(since), until: new Date(until), after, limit: 4 });
      if (page.length === 0) break;
      expect(page.length).toBeLessThanOrEqual(4);
      seen.push(...page);
      after = { day: page.at(-1)!.day, id: page.at(-1)!.id };
    }
    const want = finishedIn(since, until);
    expect(want.length).toBeGreaterThan(20);
    expect(seen.map((m) => m.id).sort((a, b) => a - b)).toEqual(want.map((r) => r.id).sort((a, b) => a - b));
    // The old day's message that finished late is in; days in order, ids in order inside each.
    expect(seen.some((m) => m.createdAt.getTime() < since)).toBe(true);
    const keys = seen.map((m) => [m.day === '-infinity' ? -Infinity : Date.parse(m.day), m.id] as const);
    for (let i = 1; i < keys.length; i++)
      expect(keys[i]![0] > keys[i - 1]![0] || (keys[i]![0] === keys[i - 1]![0] && keys[i]![1] > keys[i - 1]![1])).toBe(true);
  });

  it('finds the last message finished before a time, in the windows and past the week, a late one of an older day included', async () => {
    const last = (before: number) =>
      rows.filter((r) => r.handlers.includes(HANDLER) && r.processed < before).sort((a, b) => b.processed - a.processed)[0];
    for (const before of [Date.now(), today - 2 * DAY + 30 * 60_000, today - 8 * DAY, today - 9 * DAY + 6 * HOUR, today - 40 * DAY]) {
      const found = await lastFinishedBefore(tdb.db, HANDLER, new Date(before));
      const want = last(before);
      expect(found && found.processedAt.getTime(), at(before)).toBe(want ? want.processed : null);
    }
    // Nothing in the week before: the newest day that has one, then a later one of an older day.
    const rarely = await lastFinishedBefore(tdb.db, SPARSE, new Date(today - 2 * DAY));
    expect(rarely?.processedAt.getTime()).toBe(today - 9 * DAY - 12 * HOUR);
  });

  it('gives the values of a window, and no day after it', async () => {
    const since = today - 3 * DAY;
    const until = today - DAY;
    const values = await finishedPayloadValues(tdb.db, {
      handler: HANDLER,
      topics: ['thing.happened'],
      field: 'n',
      since: new Date(since),
      until: new Date(until),
    });
    const want = finishedIn(since, until).map((r) => rows.indexOf(r));
    expect(values.map((v) => Number(v.value)).sort((a, b) => a - b)).toEqual(want.sort((a, b) => a - b));
  });

  it('reads each of them, and the purge, through an index: no plan scans a day', async () => {
    const plans = await outboxPlansOf(tdb.url, async ({ db }) => {
      await finishedPage(db, { handler: HANDLER, since: new Date(today - 10 * DAY), until: new Date(), after: null, limit: 4 });
      await lastFinishedBefore(db, HANDLER, new Date(today - 8 * DAY));
      await finishedPayloadValues(db, {
        handler: HANDLER,
        topics: ['thing.happened'],
        field: 'n',
        since: new Date(today - 3 * DAY),
        until: new Date(today - DAY),
      });
      // The purge's batch deletes what it finds: its plan is read, its work rolled back.
      const rolledBack = db.transaction(async (tx) => {
        expect(await purgeDoneBatch(tx as unknown as typeof db, 10, 5)).toBeGreaterThan(0);
        tx.rollback();
      });
      await expect(rolledBack).rejects.toBeInstanceOf(TransactionRollbackError);
    });
    expect(plans.length).toBeGreaterThanOrEqual(4);
    for (const p of plans) expect(p).not.toMatch(/Seq Scan on outbox/);
    expect(plans.join('\n')).toMatch(/Bitmap Index Scan on outbox_\d{8}_processed_at_idx/);
  });
});
