import { createHash } from 'node:crypto';
import { and, eq, sql } from 'drizzle-orm';
import type { Tx } from '../db/transaction.ts';
import { idempotencyKeys } from '../db/schema.ts';
import { AppError } from '../errors.ts';

/*
 * Idempotency-Key for POST /bookings (the IETF httpapi draft's semantics, as Stripe has them).
 *
 * The key's row is inserted inside the booking's own transaction. A second request with the same
 * key blocks on the primary key until the first commits, then finds the stored response and
 * replays it; if the first rolled back, the second proceeds as if it were first. So two concurrent
 * requests can never make two bookings, and no "in progress" state can be left behind by a crash.
 * Only successful responses are stored: a refused request changed nothing, so retrying it is safe.
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

export const requestHash = (body: unknown) => createHash('sha256').update(canonical(body)).digest('hex');

export async function claimIdempotencyKey(
  tx: Tx,
  userId: number,
  key: string,
  hash: string,
  ttlHours: number,
): Promise<KeyClaim> {
  // An expired key is forgotten: the same key may be used afresh after its TTL.
  await tx
    .delete(idempotencyKeys)
    .where(and(eq(idempotencyKeys.userId, userId), eq(idempotencyKeys.key, key), sql`${idempotencyKeys.expiresAt} <= now()`));
  const inserted = await tx
    .insert(idempotencyKeys)
    .values({ userId, key, requestHash: hash, expiresAt: sql`now() + make_interval(hours => ${ttlHours})` })
    .onConflictDoNothing()
    .returning({ key: idempotencyKeys.key });
  if (inserted.length) return { kind: 'new' };

  const [existing] = await tx
    .select()
    .from(idempotencyKeys)
    .where(and(eq(idempotencyKeys.userId, userId), eq(idempotencyKeys.key, key)));
  if (!existing) throw new AppError('request_in_progress'); // deleted by a concurrent expiry sweep (the worker's housekeeping, src/worker/housekeeping.ts): let the client retry
  if (existing.requestHash !== hash) throw new AppError('idempotency_key_reused');
  if (existing.responseStatus === null) throw new AppError('request_in_progress');
  return { kind: 'replay', response: { status: existing.responseStatus, body: existing.responseBody } };
}

export async function storeIdempotentResponse(tx: Tx, userId: number, key: string, response: StoredResponse) {
  await tx
    .update(idempotencyKeys)
    .set({ responseStatus: response.status, responseBody: response.body })
    .where(and(eq(idempotencyKeys.userId, userId), eq(idempotencyKeys.key, key)));
}
