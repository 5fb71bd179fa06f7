import type pg from 'pg';

/** The server's WAL position; two of them give the bytes written in between (by anyone: run this alone). */
export const walLsn = async (c: pg.Client) => (await c.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0]!.lsn;

/** WAL bytes written since `from` (a walLsn). */
export const walSince = async (c: pg.Client, from: string) =>
  Number((await c.query<{ b: string }>('select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn) as b', [from])).rows[0]!.b);
