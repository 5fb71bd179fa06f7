import { deleteExpiredIdempotencyKeys } from '../bookings/idempotency.ts';
import type { Chore } from '../outbox/index.ts';
import { deleteEndedSessions } from '../users/users.repository.ts';

/**
 * The application's tables the worker's housekeeping keeps small, beside the outbox's own DONE
 * purge: expired Idempotency-Keys (with their stored responses) and expired or revoked sessions.
 * Deleting either changes no answer: both are already refused when read.
 */
export const APP_CHORES: readonly Chore[] = [
  { name: 'idempotencyKeys', deleteBatch: deleteExpiredIdempotencyKeys },
  { name: 'sessions', deleteBatch: deleteEndedSessions },
];
