import { randomUUID } from 'node:crypto';

/**
 * A time-ordered UUID (version 7, RFC 9562): the Unix time in milliseconds in the first 48 bits,
 * then 74 random bits. The same construction as the database's `outbox_uuid_v7()`
 * (migrations/0007): a v4 from the runtime's entropy pool, its first 48 bits replaced by the time
 * and its version nibble by 7.
 *
 * For ids that become index keys written in time order (a booking's id is its outbox messages'
 * key): a new entry lands at the right edge of the index instead of a random page, which keeps
 * writing cheap once the index is larger than memory (ADR 0018).
 */
export function uuidV7(now = Date.now()): string {
  const v4 = randomUUID(); // xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx
  const t = now.toString(16).padStart(12, '0');
  return `${t.slice(0, 8)}-${t.slice(8, 12)}-7${v4.slice(15)}`;
}
