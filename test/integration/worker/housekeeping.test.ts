import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { createConfiguredWorker } from '../../../src/worker/outbox-worker.ts';
import { deleteExpiredIdempotencyKeys } from '../../../src/bookings/idempotency.ts';
import { housekeepOnce, HandlerRegistry } from '../../../src/outbox/index.ts';
import { deleteEndedSessions } from '../../../src/users/users.repository.ts';
import { appChores } from '../../../src/worker/chores.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';
import { captureLogger } from '../../helpers/capture-logger.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * Housekeeping: expired idempotency keys (with their stored responses) and expired or revoked
 * sessions are deleted in bounded batches, where the worker purges old DONE messages.
 */

let tdb: TestDatabase;
let userId: number;
beforeAll(async () => {
  tdb = await createTestDatabase('housekeep');
  const { rows } = await tdb.db.execute<{ id: string }>(sql`
    insert into users (email, name, password_hash, role) values ('hk@example.test', 'HK', 'x', 'guest') returning id`);
  userId = Number(rows[0]!.id);
});
afterAll(async () => {
  await tdb?.drop();
});

async function seed(n: { expiredKeys: number; liveKeys: number; expiredSessions: number; revokedSessions: number; liveSessions: number }) {
  await tdb.db.execute(sql`truncate idempotency_keys, sessions`);
  await tdb.db.execute(sql`
    insert into idempotency_keys (user_id, key, request_hash, response_status, response_body, expires_at)
    select ${userId}::bigint, 'old-' || i, 'h', 201, '{"big":"response"}'::jsonb, now() - interval '1 minute'
      from generate_series(1, ${n.expiredKeys}) i
    union all
    select ${userId}::bigint, 'new-' || i, 'h', 201, '{}'::jsonb, now() + interval '1 hour'
      from generate_series(1, ${n.liveKeys}) i`);
  await tdb.db.execute(sql`
    insert into sessions (token_hash, user_id, expires_at, revoked_at)
    select 'exp-' || i, ${userId}::bigint, now() - interval '1 second', null from generate_series(1, ${n.expiredSessions}) i
    union all
    select 'rev-' || i, ${userId}::bigint, now() + interval '1 day', now() from generate_series(1, ${n.revokedSessions}) i
    union all
    select 'live-' || i, ${userId}::bigint, now() + interval '1 day', null from generate_series(1, ${n.liveSessions}) i`);
}

const count = async (table: 'idempotency_keys' | 'sessions', where = sql`true`) =>
  Number((await tdb.db.execute<{ n: string }>(sql`select count(*) as n from ${sql.identifier(table)} where ${where}`)).rows[0]!.n);

describe('housekeeping', () => {
  it('deletes in bounded batches: one call removes at most the batch size', async () => {
    await seed({ expiredKeys: 5, liveKeys: 2, expiredSessions: 3, revokedSessions: 2, liveSessions: 2 });
    expect(await deleteExpiredIdempotencyKeys(tdb.db, 2)).toBe(2);
    expect(await deleteEndedSessions(tdb.db, 4)).toBe(4);
    expect(await count('idempotency_keys')).toBe(5);
    expect(await count('sessions')).toBe(3);
  });

  it('one round deletes every expired key (with its stored response) and every expired or revoked session, batch after batch, and nothing live', async () => {
    await seed({ expiredKeys: 2_500, liveKeys: 3, expiredSessions: 1_200, revokedSessions: 5, liveSessions: 4 });
    const counts = await housekeepOnce(tdb.db, { retentionDays: 7, chores: appChores(workerConfig(tdb)) });
    expect(counts).toEqual({
      outbox: 0,
      outboxPartitionsDropped: 0,
      outboxPartitionsReattached: 0,
      idempotencyKeys: 2_500,
      sessions: 1_205,
      processedMessages: 0,
      consumerDeadLetters: 0,
      webhookAttempts: 0,
      webhookDeliveries: 0,
      webhookEvents: 0,
      portalLinkUses: 0,
      portalLinks: 0,
    });
    expect(await count('idempotency_keys')).toBe(3);
    expect(await count('idempotency_keys', sql`expires_at <= now()`)).toBe(0);
    expect(await count('sessions')).toBe(4);
    expect(await count('sessions', sql`revoked_at is not null or expires_at <= now()`)).toBe(0);
  });

  it('a running worker does it at start, with the DONE purge, and logs what went', async () => {
    await seed({ expiredKeys: 3, liveKeys: 1, expiredSessions: 2, revokedSessions: 1, liveSessions: 1 });
    const { logger, entries } = captureLogger();
    const w = createConfiguredWorker({
      db: tdb.db,
      config: workerConfig(tdb),
      registry: new HandlerRegistry([]),
      logger,
      listen: false,
      chores: appChores(workerConfig(tdb)),
    });
    await w.start();
    try {
      await waitFor(async () => (await count('sessions')) === 1 && (await count('idempotency_keys')) === 1);
      await waitFor(async () => entries().some((e) => e.msg === 'housekeeping deleted old rows'));
      expect(entries().find((e) => e.msg === 'housekeeping deleted old rows')).toMatchObject({
        outbox: 0,
        outboxPartitionsDropped: 0,
        idempotencyKeys: 3,
        sessions: 3,
      });
    } finally {
      await w.stop();
    }
  });
});
