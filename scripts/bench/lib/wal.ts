import type pg from 'pg';
import { withClient } from '../../lib/postgres.ts';

/** The server's WAL position; two of them give the bytes written in between (by anyone: run this alone). */
export const walLsn = async (c: pg.Client) => (await c.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0]!.lsn;

/** WAL bytes written since `from` (a walLsn). */
export const walSince = async (c: pg.Client, from: string) =>
  Number((await c.query<{ b: string }>('select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn) as b', [from])).rows[0]!.b);

/**
 * The WAL written since `from` that belongs to the database `c` is connected to (pg_walinspect, in
 * PostgreSQL's contrib): the records touching its blocks, and the commit records of their
 * transactions. The server's WAL is shared, and the other databases' autovacuum, landing in one
 * run and not the next, made the whole server's figure vary threefold between runs of one drain.
 * Its bytes (record lengths, full-page images included; the page headers of the WAL itself, under
 * 1 %, are not counted), the B-tree entries written (leaf inserts, plain or into a posting list;
 * page splits left out) and the records.
 */
async function walRecordsOfDatabaseSince(c: pg.Client, from: string): Promise<{ bytes: number; btreeEntries: number; records: number }> {
  const { rows } = await c.query<{ bytes: string; btree: string; records: string }>(
    `with upto as (select pg_current_wal_lsn() as lsn),
          mine as (select distinct b.start_lsn, b.xid
                     from upto, pg_get_wal_block_info($1::pg_lsn, upto.lsn, false) b
                    where b.reldatabase = (select oid from pg_database where datname = current_database())),
          xids as (select distinct xid from mine where xid <> 0),
          r as (select r.*
                  from upto, pg_get_wal_records_info($1::pg_lsn, upto.lsn) r
                 where r.start_lsn in (select start_lsn from mine)
                    or (r.resource_manager = 'Transaction' and r.xid in (select xid from xids)))
     select coalesce(sum(record_length), 0) as bytes,
            count(*) filter (where resource_manager = 'Btree' and record_type in ('INSERT_LEAF', 'INSERT_POST')) as btree,
            count(*) as records
       from r`,
    [from],
  );
  return { bytes: Number(rows[0]!.bytes), btreeEntries: Number(rows[0]!.btree), records: Number(rows[0]!.records) };
}

/**
 * `fn`, and the WAL the database at `url` wrote while it ran (walRecordsOfDatabaseSince). After a
 * CHECKPOINT: every run starts with the same full-page writes ahead of it, rather than a
 * checkpoint landing in whichever run it falls on.
 */
export async function walAround<T>(url: string, fn: () => Promise<T>) {
  return withClient(url, async (c) => {
    await c.query('create extension if not exists pg_walinspect');
    await c.query('checkpoint');
    const from = await walLsn(c);
    const result = await fn();
    return { result, wal: await walRecordsOfDatabaseSince(c, from) };
  });
}
