import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { ConsumedEvent } from './event.ts';

export type DeadLetterRow = {
  id: number;
  consumer_group: string;
  message_id: string;
  stream_seq: number | null;
  subject: string;
  headers: Record<string, string>;
  data: unknown;
  deliveries: number;
  last_error: string;
  created_at: Date;
};

/**
 * Records an event this group gave up on. Upsert: an event replayed and failing again reopens its
 * row (replayed_at back to null) instead of adding a second one.
 */
export async function recordDeadLetter(db: Db, group: string, e: ConsumedEvent, error: string): Promise<void> {
  await db.execute(sql`
    insert into consumer_dead_letters (consumer_group, message_id, stream_seq, subject, headers, data, deliveries, last_error)
    values (${group}, ${e.messageId}, ${e.streamSeq}, ${e.subject}, ${JSON.stringify(e.headers)}::jsonb,
            ${JSON.stringify(e.body ?? null)}::jsonb, ${e.deliveries}, ${error.slice(0, 4000)})
    on conflict (consumer_group, message_id) do update
       set deliveries = excluded.deliveries, last_error = excluded.last_error,
           created_at = now(), replayed_at = null`);
}

/** The group's dead letters not yet replayed, oldest first. */
export async function openDeadLetters(db: Db, group: string, limit = 1000): Promise<DeadLetterRow[]> {
  const { rows } = await db.execute<DeadLetterRow>(sql`
    select id::int as id, consumer_group, message_id, stream_seq::int as stream_seq, subject, headers, data, deliveries, last_error, created_at
      from consumer_dead_letters
     where consumer_group = ${group} and replayed_at is null
     order by id
     limit ${limit}`);
  return rows;
}

export async function countOpenDeadLetters(db: Db, group: string): Promise<number> {
  const { rows } = await db.execute<{ n: number }>(
    sql`select count(*)::int as n from consumer_dead_letters where consumer_group = ${group} and replayed_at is null`,
  );
  return rows[0]!.n;
}

/**
 * Open dead letters of every group that has any, by group: one query for the admin view however
 * many groups there are (consumer_dead_letters_open_idx holds exactly these rows).
 */
export async function countOpenDeadLettersByGroup(db: Db): Promise<Map<string, number>> {
  const { rows } = await db.execute<{ consumer_group: string; n: number }>(
    sql`select consumer_group, count(*)::int as n from consumer_dead_letters where replayed_at is null group by consumer_group`,
  );
  return new Map(rows.map((r) => [r.consumer_group, r.n]));
}
