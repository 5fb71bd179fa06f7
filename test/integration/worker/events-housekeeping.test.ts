import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { housekeepOnce } from '../../../src/outbox/index.ts';
import { appChores, INBOX_MARGIN_SECONDS, RESOLVED_DEAD_LETTER_RETENTION_DAYS } from '../../../src/worker/chores.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.ts';
import { workerConfig } from '../../helpers/worker-config.ts';

/*
 * The events consumers' tables in the worker's housekeeping: inbox rows (processed_messages) go
 * once the stream can no longer deliver their event again, resolved consumer dead letters after a
 * month; an inbox row an open dead letter still depends on, and open dead letters, stay.
 */

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('evhousekeep');
});
afterAll(async () => {
  await tdb?.drop();
});

const MAX_AGE = 3 * 24 * 3600; // EVENTS_MAX_AGE_SECONDS of this test: 3 days

async function inbox(group: string, id: string, ageSeconds: number) {
  await tdb.db.execute(sql`
    insert into processed_messages (consumer_group, message_id, stream_seq, processed_at)
    values (${group}, ${id}, 1, now() - make_interval(secs => ${ageSeconds}))`);
}

async function deadLetter(group: string, id: string, replayedDaysAgo: number | null) {
  await tdb.db.execute(sql`
    insert into consumer_dead_letters (consumer_group, message_id, stream_seq, subject, headers, data, deliveries, last_error, created_at, replayed_at)
    values (${group}, ${id}, 1, 'stayhub.booking.created', '{}'::jsonb, '{}'::jsonb, 5, 'Error: x', now() - interval '90 days',
            ${replayedDaysAgo === null ? null : sql`now() - make_interval(days => ${replayedDaysAgo})`})`);
}

const ids = async (table: 'processed_messages' | 'consumer_dead_letters') =>
  (await tdb.db.execute<{ id: string }>(sql`select message_id as id from ${sql.identifier(table)} order by message_id`)).rows.map(
    (r) => r.id,
  );

describe('housekeeping of the events consumers’ tables', () => {
  it('deletes inbox rows past the stream’s max age plus a margin, and dead letters resolved a month ago; nothing else', async () => {
    const retention = MAX_AGE + INBOX_MARGIN_SECONDS;
    await inbox('earnings', 'old-1', retention + 60);
    await inbox('earnings', 'old-2', retention + 3600);
    await inbox('other', 'old-3', retention + 60);
    await inbox('earnings', 'within-margin', MAX_AGE + 60); // past the max age, not past the margin
    await inbox('earnings', 'recent', 60);
    // Applied long ago by a replay from a time, and still an open dead letter: replaying it must find it applied.
    await inbox('earnings', 'old-with-open-dead-letter', retention + 60);
    await deadLetter('earnings', 'old-with-open-dead-letter', null);
    await deadLetter('earnings', 'resolved-long-ago', RESOLVED_DEAD_LETTER_RETENTION_DAYS + 1);
    await deadLetter('earnings', 'resolved-recently', RESOLVED_DEAD_LETTER_RETENTION_DAYS - 1);
    await deadLetter('earnings', 'open', null);

    const chores = appChores(workerConfig(tdb, { EVENTS_MAX_AGE_SECONDS: String(MAX_AGE) }));
    const counts = await housekeepOnce(tdb.db, { retentionDays: 7, chores });
    expect(counts).toMatchObject({ processedMessages: 3, consumerDeadLetters: 1 });
    expect(await ids('processed_messages')).toEqual(['old-with-open-dead-letter', 'recent', 'within-margin']);
    expect(await ids('consumer_dead_letters')).toEqual(['old-with-open-dead-letter', 'open', 'resolved-recently']);

    // In bounded batches, like every chore.
    await tdb.db.execute(sql`
      insert into processed_messages (consumer_group, message_id, processed_at)
      select 'bulk', 'bulk-' || i, now() - interval '30 days' from generate_series(1, 2500) i`);
    const again = await housekeepOnce(tdb.db, { retentionDays: 7, chores });
    expect(again).toMatchObject({ processedMessages: 2500, consumerDeadLetters: 0 });
  });

  it('keeps an inbox row as long as EVENTS_MAX_AGE_SECONDS says, however long that is', async () => {
    await tdb.db.execute(sql`truncate processed_messages, consumer_dead_letters`);
    await inbox('earnings', 'twenty-days', 20 * 24 * 3600);
    const month = appChores(workerConfig(tdb, { EVENTS_MAX_AGE_SECONDS: String(30 * 24 * 3600) }));
    expect(await housekeepOnce(tdb.db, { retentionDays: 7, chores: month })).toMatchObject({ processedMessages: 0 });
    const week = appChores(workerConfig(tdb));
    expect(await housekeepOnce(tdb.db, { retentionDays: 7, chores: week })).toMatchObject({ processedMessages: 1 });
  });
});
