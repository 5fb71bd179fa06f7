import type pg from 'pg';
import { ensureOutboxPartitions, listOutboxPartitions } from '../../src/outbox/partitions.ts';

/**
 * Lays an EMPTY outbox out as a database that has run for a while: one partition for everything
 * before `daysBack` days ago, then a partition per day up to a week ahead, so tests can write rows
 * whose day has ended and see it dropped. (A fresh database's first partition holds everything
 * before tomorrow: nothing in it expires during a test.)
 */
export async function layOutPastDays(pool: pg.Pool, daysBack: number): Promise<void> {
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from outbox');
  if (rows[0]!.n !== 0) throw new Error('layOutPastDays: the outbox must be empty');
  for (const p of await listOutboxPartitions(pool)) {
    await pool.query(`alter table outbox detach partition ${p.name}`);
    await pool.query(`drop table ${p.name}`);
  }
  const first = new Date(Math.floor(Date.now() / 86_400_000 - daysBack) * 86_400_000);
  await pool.query('create table outbox_before (like outbox including defaults including constraints)');
  await pool.query('alter table outbox_before add primary key (id), add unique (public_id)');
  await pool.query(`alter table outbox attach partition outbox_before for values from (minvalue) to ('${first.toISOString()}')`);
  await ensureOutboxPartitions(pool);
}

/** The name of the outbox's partition of the UTC day `days` days from today (0: today). */
export function dayName(days: number): string {
  const d = new Date(Math.floor(Date.now() / 86_400_000 + days) * 86_400_000);
  return `outbox_${d.toISOString().slice(0, 10).replaceAll('-', '')}`;
}

/** Where a table named `name` stands: no such table, a table alone, or a partition of the outbox. */
export async function tableState(pool: pg.Pool, name: string): Promise<'absent' | 'alone' | 'partition'> {
  const { rows } = await pool.query<{ partition: boolean }>(
    `select exists (select 1 from pg_inherits where inhrelid = c.oid and inhparent = 'outbox'::regclass) as partition
       from pg_class c where c.relname = $1 and c.relnamespace = 'public'::regnamespace`,
    [name],
  );
  if (!rows.length) return 'absent';
  return rows[0]!.partition ? 'partition' : 'alone';
}

/** A crash between a drop's two statements, or a person: the day's partition detached and left as a table. */
export async function detachDay(pool: pg.Pool, name: string): Promise<void> {
  await pool.query(`alter table outbox detach partition ${name}`);
}
