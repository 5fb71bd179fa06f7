import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';

/** What a host asks for by hand, each with a budget of its own. */
export type ManualAction = 'test' | 'retry' | 'recover';

/**
 * Takes one token from the host's bucket for `action`, or says how long until one is there.
 * The bucket holds `perMinute` tokens (a burst of that many) and refills at `perMinute` a minute.
 *
 * One statement: the upsert's row lock serialises concurrent requests of one host, and the
 * `where` lets the update through only while a token is left, so two requests can never both take
 * the last one. No row back means empty; the second statement reads how long the refill takes.
 */
export async function takeManualToken(
  db: Db,
  hostId: number,
  action: ManualAction,
  perMinute: number,
): Promise<{ ok: true } | { ok: false; retryAfterSeconds: number }> {
  const perSecond = perMinute / 60;
  const refilled = sql`least(${perMinute}::float8, b.tokens + extract(epoch from now() - b.refilled_at) * ${perSecond}::float8)`;
  const { rows } = await db.execute(sql`
    insert into webhook_host_budgets as b (host_id, action, tokens, refilled_at)
    values (${hostId}, ${action}, ${perMinute - 1}::float8, now())
    on conflict (host_id, action) do update set tokens = ${refilled} - 1, refilled_at = now()
     where ${refilled} >= 1
    returning 1`);
  if (rows.length === 1) return { ok: true };
  const { rows: left } = await db.execute<{ tokens: number }>(sql`
    select ${refilled} as tokens from webhook_host_budgets b where b.host_id = ${hostId} and b.action = ${action}`);
  const missing = 1 - Number(left[0]?.tokens ?? 0);
  return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(missing / perSecond)) };
}
