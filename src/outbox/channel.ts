import type { NotifiedMessage } from './claim.ts';
import { publicIdParts } from './public-id.ts';

/** The channel enqueue notifies and the worker LISTENs on. */
export const OUTBOX_CHANNEL = 'outbox';

/*
 * What a wake-up says. Sent by the statement that writes the message (inside its transaction), it
 * names the message: its public id, which holds its id and its created_at (src/outbox/public-id.ts),
 * so an idle worker claims it by its primary key instead of walking the claim's indexes (ADR
 * 0058). Every other wake-up (after a commit, coalesced with others; a requeue; a hand-back; the
 * rows made from the WAL) says only "look": its payload is a topic or a word, and the worker walks.
 * Workers of the release before read no payload, so both kinds wake every worker.
 */

/** The wake-up naming its message, as SQL: `publicId` is the row's public_id column. */
export const wakeUpNaming = (publicId: string) => `pg_notify('${OUTBOX_CHANNEL}', ${publicId}::text)`;

/** The message a wake-up names, or null when it names none (a topic, nothing, anything else). */
export function notifiedBy(payload: string | undefined): NotifiedMessage | null {
  if (payload === undefined || payload.length !== 36) return null;
  const parts = publicIdParts(payload);
  if (parts === null) return null;
  const id = Number(parts.id);
  return Number.isSafeInteger(id) ? { id, createdAtMs: Date.parse(parts.createdFrom) } : null;
}
