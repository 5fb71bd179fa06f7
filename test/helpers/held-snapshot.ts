import pg from 'pg';

/**
 * A snapshot held open on a connection of its own, as a long report, pg_dump or a transaction left
 * idle holds one: REPEATABLE READ, taken by its first read. Nothing finished after it began can be
 * cleaned up, from the tables or their indexes, until it is released.
 */
export async function holdSnapshot(url: string): Promise<{ release(): Promise<void> }> {
  const holder = new pg.Client({ connectionString: url, application_name: 'stayhub-test-held-snapshot' });
  await holder.connect();
  try {
    await holder.query('begin isolation level repeatable read');
    await holder.query('select 1 from pg_class limit 1');
  } catch (err) {
    await holder.end();
    throw err;
  }
  return {
    async release() {
      await holder.query('rollback').catch(() => undefined);
      await holder.end();
    },
  };
}
