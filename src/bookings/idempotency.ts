import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { clientOf, run, statement } from '../db/prepared.ts';
import type { Tx } from '../db/transaction.ts';
import { AppError } from '../errors.ts';

/*
 * Idempotency-Key for POST /bookings (the IETF httpapi draft's semantics, as Stripe has them).
 *
 * The key's row is inserted inside the booking's own transaction. A second request with the same
 * key blocks on the primary key until the first commits, then finds the stored response and
 * replays it; if the first rolled back, the second proceeds as if it were first. So two concurrent
 * requests can never make two bookings, and no "in progress" state can be left behind by a crash.
 * What is stored is the request's answer: a 201 with its booking, and a 409 dates_unavailable too
 * (the refusal is committed with the key, so a duplicate sent at the same moment replays the 409
 * instead of booking dates a cancellation freed meanwhile: booking.service.ts). Any other refusal
 * rolls the key back with everything else: it changed nothing, so retrying it is safe.
 */

export interface StoredResponse {
  status: number;
  body: unknown;
}

export type KeyClaim = { kind: 'new' } | { kind: 'replay'; response: StoredResponse };

/** Canonical JSON (sorted keys), so the same body in another key order is the same request. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/*
 * Prepared statements (db/prepared.ts): POST /bookings with a key runs them on every request.
 *
 * CLAIM takes the key in one round trip: a new key is inserted; an EXPIRED key is taken over in
 * place (the same key may be used afresh after its TTL: this was a delete then an insert); a live
 * key returns nothing and is looked up by FIND. A live key row written by a transaction still in
 * flight makes CLAIM wait for it (the primary key), exactly as the plain insert did: a concurrent
 * duplicate then sees the first one's outcome. ON CONFLICT DO UPDATE also locks a live row it does
 * not update, until this transaction ends; replays of one key therefore queue behind each other,
 * which costs nothing (a replay's transaction is one more read).
 */
const CLAIM = statement(
  'idempotency-claim-v1',
  `insert into idempotency_keys as k (user_id, key, request_hash, expires_at)
   values ($1, $2, $3, now() + make_interval(hours => $4::int))
   on conflict (user_id, key) do update
     set request_hash = excluded.request_hash, response_status = null, response_body = null,
         created_at = now(), expires_at = excluded.expires_at
     where k.expires_at <= now()
   returning 1 as claimed`,
);
const FIND = statement(
  'idempotency-find-v1',
  'select request_hash, response_status, response_body from idempotency_keys where user_id = $1 and key = $2',
);
const STORE = statement(
  'idempotency-store-v1',
  'update idempotency_keys set response_status = $3, response_body = $4::jsonb where user_id = $1 and key = $2',
);

export const requestHash = (body: unknown) => createHash('sha256').update(canonical(body)).digest('hex');

export async function claimIdempotencyKey(tx: Tx, userId: number, key: string, hash: string, ttlHours: number): Promise<KeyClaim> {
  const client = clientOf(tx);
  const claimed = await run(client, CLAIM, [userId, key, hash, ttlHours]);
  if (claimed.length) return { kind: 'new' };

  const [existing] = await run<{ request_hash: string; response_status: number | null; response_body: unknown }>(client, FIND, [
    userId,
    key,
  ]);
  if (!existing) throw new AppError('request_in_progress'); // deleted by a concurrent expiry sweep (the worker's housekeeping, deleteExpiredIdempotencyKeys below): let the client retry
  if (existing.request_hash !== hash) throw new AppError('idempotency_key_reused');
  if (existing.response_status === null) throw new AppError('request_in_progress');
  return { kind: 'replay', response: { status: existing.response_status, body: existing.response_body } };
}

export async function storeIdempotentResponse(tx: Tx, userId: number, key: string, response: StoredResponse) {
  await run(clientOf(tx), STORE, [userId, key, response.status, JSON.stringify(response.body)]);
}

/**
 * Deletes up to `batchSize` keys past expires_at, with their stored responses (the worker's
 * housekeeping). An expired key is already ignored by POST /bookings, so deleting it changes no
 * answer. Walks idempotency_keys_expires_idx; SKIP LOCKED: two workers never wait on each other.
 */
export async function deleteExpiredIdempotencyKeys(db: Db, batchSize: number): Promise<number> {
  const res = await db.execute(sql`
    delete from idempotency_keys
     where (user_id, key) in (select user_id, key from idempotency_keys
                               where expires_at <= now()
                               order by expires_at
                               limit ${batchSize}
                                 for update skip locked)`);
  return res.rowCount ?? 0;
}
