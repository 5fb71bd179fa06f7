import { sql } from 'drizzle-orm';
import type { Db } from '../../src/db/client.ts';

/** The database's clock right now (clock_timestamp, microseconds), to order events against rows. */
export async function dbClock(db: Db): Promise<string> {
  const { rows } = await db.execute<{ t: string }>(sql`select clock_timestamp()::text as t`);
  return rows[0]!.t;
}
