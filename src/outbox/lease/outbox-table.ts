import { notAhead } from '../sql.ts';
import type { LeasedTable } from './leased-table.ts';

/**
 * The outbox as the lease core sees it (./leased-table.ts): its lease in leased_until, in no index
 * (ADR 0022), and every statement kept to the days in sight (src/outbox/sql.ts notAhead).
 */
export const OUTBOX: LeasedTable = {
  table: 'outbox',
  pending: 'PENDING',
  due: 'available_at',
  leaseColumn: 'leased_until',
  guard: notAhead,
};
