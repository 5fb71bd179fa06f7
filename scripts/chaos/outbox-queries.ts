import { sql } from 'drizzle-orm';
import type pg from 'pg';
import type { Db } from '../../src/db/client.ts';
import type { OutboxRow } from './evidence.ts';

/*
 * Every query of the chaos run that reads the outbox table, in one place: src/outbox/index.ts
 * offers no read of these shapes (the judge needs each message as written, with the work its
 * lanes still hold; the sampler a count and an age per topic list). They only read. A message's
 * work moved into a handler's lane (src/outbox/lanes.ts) is a row of its own whose origin_id is
 * the message: these queries fold it back into its message.
 */

/** PENDING messages of the given topics, and the age of the oldest (null: none), for the sampler. */
export async function pendingOf(admin: pg.Pool, topics: string[]): Promise<{ pending: number; age: number | null }> {
  const { rows } = await admin.query<{ pending: number; age: number | null }>(
    `select count(*)::int as pending, extract(epoch from now() - min(created_at))::float8 as age
       from outbox where status = 'PENDING' and topic = any($1)`,
    [topics],
  );
  return rows[0]!;
}

/** How many messages of the given topics are PENDING: the drain waits for none. */
export async function pendingCount(admin: pg.Pool, topics: string[]): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(`select count(*)::int as n from outbox where status = 'PENDING' and topic = any($1)`, [
    topics,
  ]);
  return rows[0]!.n;
}

/** One row per message as written, with the worst status and the error of its lanes' work. */
export async function messagesAsWritten(admin: pg.Pool): Promise<OutboxRow[]> {
  const { rows } = await admin.query<OutboxRow>(
    // One row per message as written. A handler's work moved into its lane (src/outbox/lanes.ts)
    // is part of its message: the message counts as PENDING or DEAD while that work is.
    `with lanes as (
       select origin_id, max(case status when 'DEAD' then 2 when 'PENDING' then 1 else 0 end) as worst,
              max(last_error) filter (where status <> 'DONE') as error
         from outbox where lane is not null group by origin_id)
     select o.public_id as "publicId", o.topic, o.key,
            case l.worst when 2 then 'DEAD' when 1 then 'PENDING' else o.status end as status,
            o.attempts, coalesce(l.error, o.last_error) as "lastError", o.handlers_done as "handlersDone"
       from outbox o left join lanes l on l.origin_id = o.public_id
      where o.lane is null`,
  );
  return rows;
}

/** The messages that took longest from commit to DONE/DEAD. */
export async function slowestMessages(admin: pg.Pool, limit: number) {
  const { rows } = await admin.query<{
    topic: string;
    status: string;
    attempts: number;
    seconds: number;
    created_at: Date;
    last_error: string | null;
  }>(
    `select topic, status, attempts, extract(epoch from processed_at - created_at)::float8 as seconds, created_at, last_error
       from outbox where processed_at is not null order by processed_at - created_at desc limit $1`,
    [limit],
  );
  return rows;
}

export interface BookingEventRow {
  public_id: string;
  topic: string;
  key: string;
  status: string;
  handlers_done: string[];
  /** Relay work of it still waits in the relay's lane, or died there. */
  lane_open: boolean;
  created_ms: number;
}

/** The booking events of the outbox, with whether their relay work is still open in its lane. */
export async function bookingEvents(db: Db): Promise<BookingEventRow[]> {
  const { rows } = await db.execute<BookingEventRow & Record<string, unknown>>(
    // An event is relayed when its message and the relay's lane work of it (src/outbox/lanes.ts)
    // are: a message whose relay failed is DONE while its lane row still waits or is DEAD.
    sql`with lanes as (
          select origin_id, max(case status when 'DEAD' then 2 when 'PENDING' then 1 else 0 end) as worst
            from outbox where lane is not null group by origin_id)
        select o.public_id, o.topic, o.key,
               case l.worst when 2 then 'DEAD' when 1 then 'PENDING' else o.status end as status,
               o.handlers_done, coalesce(l.worst, 0) > 0 as lane_open,
               (extract(epoch from o.created_at) * 1000)::float8 as created_ms
          from outbox o left join lanes l on l.origin_id = o.public_id
         where o.lane is null and o.topic in ('booking.created', 'booking.cancelled')`,
  );
  return rows;
}

/** The latest booking.created events (key and payload), newest first: real bookings for a forger to name. */
export async function latestBookingsCreated(db: Db, limit: number): Promise<{ key: string; payload: Record<string, unknown> }[]> {
  const { rows } = await db.execute<{ key: string; payload: Record<string, unknown> }>(
    sql`select key, payload from outbox where topic = 'booking.created' and lane is null order by id desc limit ${limit}`,
  );
  return rows;
}
