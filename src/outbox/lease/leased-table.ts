import { ASYNC_COMMIT } from '../sql.ts';

/*
 * The lease, written once for every queue StayHub claims from: the outbox's messages and the
 * webhook deliveries (docs/adr/0049-one-lease-core-for-two-queues.md). A queue keeps its own
 * choosing (which due rows a claim takes, in what order: the outbox's two walks and turns, the
 * webhooks' endpoint caps, host turns and rate schedules); what follows the choice is the same for
 * both, and is built here from a description of the table:
 *
 *   lock    FOR UPDATE SKIP LOCKED over the chosen rows, rechecked due and not held (a row another
 *           claim took and committed since our snapshot is dropped, never claimed twice);
 *   lease   attempts + 1 (counted at the claim, so a message that kills its worker still reaches
 *           its last attempt), a fresh claim id (the fencing token), the lease's deadline;
 *   fence   every later write of a claimed row is `WHERE id = … AND claim_id = token AND pending`:
 *           a worker whose lease ran out and was claimed again writes nothing;
 *   release a settle clears the claim (and the lease, where it has a column of its own);
 *   hand back  claimed, never started: the attempt given back, due as before the claim, in one
 *           batched, fenced statement;
 *   extend  a held lease moved forward (the heartbeat), batched and fenced.
 *
 * Every batched write commits asynchronously (src/outbox/sql.ts): a write a database crash loses
 * leaves the row held until its lease ends, never lost.
 */

/** A table whose rows are claimed under a lease: what the lease needs to know of it. */
export interface LeasedTable {
  readonly table: string;
  /** The status of a row that still owes work: 'PENDING' (outbox), 'pending' (webhook deliveries). */
  readonly pending: string;
  /** When a row falls due: available_at, next_attempt_at. */
  readonly due: string;
  /**
   * Where the lease's deadline is kept: a column of its own (the outbox's leased_until, in no index,
   * so a claim is a HOT update that writes no index entry: ADR 0022), or null for the due column
   * itself (webhook deliveries: the claim moves next_attempt_at to the lease's end, which hides
   * the row from every due probe, and a hand-back puts it back where it was).
   */
  readonly leaseColumn: string | null;
  /** A condition on the row every statement adds (the outbox's partition guard: ./outbox-table.ts). */
  readonly guard?: (alias?: string) => string;
}

const guarded = (t: LeasedTable, alias?: string) => (t.guard ? ` and ${t.guard(alias)}` : '');

/** `alias.` or nothing. */
const col = (alias: string | undefined, column: string) => (alias ? `${alias}.${column}` : column);

/** Due now and not held by a live lease. */
export function dueNow(t: LeasedTable, alias: string): string {
  const held = t.leaseColumn ? ` and (${alias}.${t.leaseColumn} is null or ${alias}.${t.leaseColumn} <= now())` : '';
  return `${alias}.status = '${t.pending}' and ${alias}.${t.due} <= now()${held}`;
}

/**
 * The claim's lock: the rows of `chosen` (a subquery of ids) still due and not held, locked, the
 * ones another claim holds stepped over. `columns` are what the claim reads of them.
 */
export function lockChosen(t: LeasedTable, alias: string, columns: string, chosen: string): string {
  return `select ${columns}
    from ${t.table} ${alias}
   where ${alias}.id in (${chosen}) and ${dueNow(t, alias)}${guarded(t, alias)}
     for update skip locked`;
}

/**
 * The claim's SET: the attempt counted, the fencing token, the lease. `token` and `seconds` are SQL
 * expressions (a parameter, gen_random_uuid()); `alias` qualifies the row's own attempts.
 */
export function takeLease(t: LeasedTable, alias: string, token: string, seconds: string): string {
  return `attempts = ${alias}.attempts + 1, claim_id = ${token}, ${t.leaseColumn ?? t.due} = now() + make_interval(secs => ${seconds})`;
}

/** The fence every write of a claimed row carries; `id` and `token` are SQL expressions. */
export function fence(t: LeasedTable, alias: string | undefined, id: string, token: string): string {
  return `${col(alias, 'id')} = ${id} and ${col(alias, 'claim_id')} = ${token} and ${col(alias, 'status')} = '${t.pending}'${guarded(t, alias)}`;
}

/**
 * The fence of a batched write, whose ids and tokens come from an array joined to the table
 * (`batch`, the array's alias, with columns id and claim_id): the same three conditions, the
 * status's written `(…) is true`. It means the same (the status is never null), but the planner
 * can neither match it to a partial index of pending rows nor estimate it from the statistics'
 * share of them. That share, taken after a quiet spell or not at all on a day just made, says
 * "none" just as a flood arrives; believed, it made the pending rows the outer side of the join,
 * each read against every id of the batch (ADR 0053). Without it the primary key, probed per id,
 * is the cheap way in.
 */
export function batchFence(t: LeasedTable, alias: string, batch: string): string {
  return `${alias}.id = ${batch}.id and ${alias}.claim_id = ${batch}.claim_id and (${alias}.status = '${t.pending}') is true${guarded(t, alias)}`;
}

/** What a settle sets besides its outcome: the claim cleared, and the lease where it has a column. */
export function release(t: LeasedTable): string {
  return t.leaseColumn ? `claim_id = null, ${t.leaseColumn} = null` : 'claim_id = null';
}

/**
 * Gives claimed, never started rows back: $1 ids, $2 claim ids, and where the lease sits in the due
 * column, $3 when each was due before the claim (so it keeps its place among the others). The
 * claim's attempt is given back. Fenced: a row claimed again since is left alone.
 */
export function handBackStatement(t: LeasedTable): string {
  const dueBefore = t.leaseColumn ? '' : ', $3::timestamptz[]';
  const restore = t.leaseColumn ? `${t.leaseColumn} = null` : `${t.due} = c.due_at`;
  return `update ${t.table} x
      set attempts = greatest(x.attempts - 1, 0), claim_id = null, ${restore}
     from unnest($1::bigint[], $2::uuid[]${dueBefore}) as c(id, claim_id${t.leaseColumn ? '' : ', due_at'}), ${ASYNC_COMMIT}
    where ${batchFence(t, 'x', 'c')}`;
}

/**
 * Moves the lease of every given claim ($1 ids, $2 claim ids) to now() + $3 seconds; returns the
 * ordinal (1-based) of each claim still held.
 */
export function extendStatement(t: LeasedTable): string {
  return `update ${t.table} x set ${t.leaseColumn ?? t.due} = now() + make_interval(secs => $3)
     from unnest($1::bigint[], $2::uuid[]) with ordinality as c(id, claim_id, n), ${ASYNC_COMMIT}
    where ${batchFence(t, 'x', 'c')}
   returning c.n`;
}
