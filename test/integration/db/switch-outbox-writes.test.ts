import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/net/free-port.ts';
import type { TestDatabase } from '../../helpers/db.ts';
import { httpApi } from '../../helpers/http.ts';
import { logicalTestDatabase } from '../../helpers/logical-database.ts';
import { runScript, ROOT, scriptEnv } from '../../helpers/npm-run.ts';
import { entryOf, firstSessionThenLoad, nothingLostNorDoubled, rollingProcesses } from '../../helpers/rolling.ts';
import { startSmtpServer, type TestSmtpServer } from '../../helpers/smtp.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * OUTBOX_WRITES switched on and off again while bookings keep arriving, process by process, in the
 * order docs/operating.md ("Messages in the WAL instead of rows") gives:
 *   on:  `migrate` makes the slot; the workers roll to wal (a new one beside the old, which then
 *        stops); the API rolls to wal;
 *   off: the API rolls back to table; once the slot has been read past everything the wal API
 *        wrote, the workers roll back; the slot is dropped.
 * Then: no request answered 5xx or left unanswered, every message DONE, and each email sent
 * exactly once (by Message-ID, at a real SMTP server). A server of its own at wal_level logical
 * (test/helpers/logical-database.ts). Slow (about a minute): seven processes start, each loaded by tsx.
 */

let db: TestDatabase | undefined;
let smtp: TestSmtpServer | undefined;
const slot = `stayhub_switch_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
const processes = rollingProcesses((extra) =>
  scriptEnv({
    DATABASE_URL: db!.url,
    ENV_FILE: '',
    SMTP_URL: smtp!.url,
    POLL_INTERVAL_MS: '100',
    RATE_LIMIT_AUTH_PER_MINUTE: '1000',
    LOG_LEVEL: 'warn',
    OUTBOX_SLOT: slot,
    ...extra,
  }),
);

beforeAll(async () => {
  db = await logicalTestDatabase('walswitch');
  smtp = await startSmtpServer();
}, 60_000);
afterAll(async () => {
  await processes.killAll();
  await smtp?.close();
  await db?.drop();
});

const slotExists = async () =>
  (await db!.pool.query<{ n: number }>('select count(*)::int as n from pg_replication_slots where slot_name = $1', [slot])).rows[0]!.n ===
  1;

describe('switching OUTBOX_WRITES with the API serving', () => {
  it('loses no message, does none twice and answers no 5xx, switched on and off again', async () => {
    const { start, stop, serving } = processes;
    const WAL = { OUTBOX_WRITES: 'wal' };
    const TABLE = { OUTBOX_WRITES: 'table' };
    const [tablePort, walPort, backPort] = [await freePort(), await freePort(), await freePort()];
    const tableApi = start(ROOT, 'api', { ...TABLE, PORT: String(tablePort) });
    const tableWorker = start(ROOT, 'drain-outbox', TABLE);
    await serving(tablePort, tableApi);

    const load = await firstSessionThenLoad(tablePort);
    try {
      await load.more(5, 'bookings written as rows');
      // On. 1. The slot, made by migrate before anything writes to the WAL.
      expect(await slotExists()).toBe(false);
      const migrated = await runScript(entryOf(ROOT, 'migrate'), [], processes.env(WAL));
      expect(migrated, migrated.stderr).toMatchObject({ code: 0 });
      expect(migrated.stdout).toContain(`replication slot ${slot} made`);
      expect(await slotExists()).toBe(true);
      // 2. The workers roll to wal.
      const walWorker = start(ROOT, 'drain-outbox', WAL);
      await load.more(5, 'bookings with a worker of each setting');
      await stop(tableWorker);
      // 3. The API rolls to wal; it refuses to start without the slot, which is there.
      const walApi = start(ROOT, 'api', { ...WAL, PORT: String(walPort) });
      await serving(walPort, walApi);
      load.moveTo(httpApi(`http://127.0.0.1:${walPort}`));
      await sleep(500); // requests already sent to the table API are answered before it stops
      await stop(tableApi);
      const positionBefore = await db!.pool.query('select done_to from outbox_wal_position where slot = $1', [slot]);
      await load.more(8, 'bookings written to the WAL');
      // The worker made rows of what the wal API wrote: its position in the slot moved.
      const { rows: moved } = await db!.pool.query<{ done_to: string | null }>(
        'select done_to::text from outbox_wal_position where slot = $1',
        [slot],
      );
      expect(moved[0]?.done_to ?? null).not.toBeNull();
      expect(moved[0]!.done_to).not.toBe(positionBefore.rows[0]?.done_to);

      // Off. 1. The API rolls back to table.
      const backApi = start(ROOT, 'api', { ...TABLE, PORT: String(backPort) });
      await serving(backPort, backApi);
      load.moveTo(httpApi(`http://127.0.0.1:${backPort}`));
      await sleep(500);
      await stop(walApi);
      // 2. Everything the wal API wrote is behind this position: once the slot has moved past it
      // (what `npm run outbox:stats` reports as how far behind the slot is), nothing is left in it.
      const { rows: end } = await db!.pool.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn');
      await waitFor(
        async () =>
          (
            await db!.pool.query<{ read: boolean }>(
              'select confirmed_flush_lsn >= $2::pg_lsn as read from pg_replication_slots where slot_name = $1',
              [slot, end[0]!.lsn],
            )
          ).rows[0]?.read || undefined,
        30_000,
        'the slot read past the wal API',
      );
      // 3. The workers roll back to table, then the slot goes.
      const backWorker = start(ROOT, 'drain-outbox', TABLE);
      await load.more(5, 'bookings written as rows again, a worker of each setting');
      await stop(walWorker);
      await db!.pool.query('select pg_drop_replication_slot($1)', [slot]);
      await load.more(5, 'bookings after the slot was dropped');
      await nothingLostNorDoubled(load, db!.url, smtp!, 30);
      await stop(backWorker);
      await stop(backApi);
    } finally {
      await load.stop();
    }
    expect(processes.errors()).toEqual([]);
  }, 240_000);
});
