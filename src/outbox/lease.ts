import { execute, statement, type Executor } from './executor.ts';
import { extendStatement, handBackStatement } from './lease/leased-table.ts';
import { intArray, uuidArray } from './sql.ts';
import { OUTBOX } from './lease/outbox-table.ts';
import { wakeUpSaying } from './wake-up.ts';

/*
 * The lease verbs: keeping a claim alive while its handlers run, and giving back claims that were
 * never started. Fenced on (id, claim id) like every settle (src/outbox/settle.ts), batched (one
 * statement for every message a worker holds), asynchronous commit (src/outbox/sql.ts). Their SQL
 * is the lease core's (src/outbox/lease/leased-table.ts), the one the webhook deliveries use too.
 */

export interface Claim {
  id: number;
  claimId: string;
}

function arrays(claims: readonly Claim[]): [string, string] {
  const ids = new Array<number>(claims.length);
  const tokens = new Array<string>(claims.length);
  for (let i = 0; i < claims.length; i++) {
    ids[i] = claims[i]!.id;
    tokens[i] = claims[i]!.claimId;
  }
  return [intArray(ids), uuidArray(tokens)];
}

const EXTEND_LEASES = statement('outbox-extend-leases', extendStatement(OUTBOX));

/**
 * Moves the lease deadline (leased_until, in no index: no index entry written, ADR 0022) of every
 * given claim to now() + leaseSeconds. The worker's heartbeat
 * calls this for everything it holds, every quarter of a lease. Without it, a handler that outlives
 * LEASE_SECONDS would see its message claimed and run a second time, in parallel, by another
 * worker. A worker that dies stops extending, so its messages still come back one lease after its
 * last heartbeat. Returns, per claim and in order, whether it was still held.
 */
export async function extendLeases(q: Executor, claims: readonly Claim[], leaseSeconds: number): Promise<boolean[]> {
  if (claims.length === 0) return [];
  const [ids, tokens] = arrays(claims);
  const res = await execute<{ n: string }>(q, EXTEND_LEASES, [ids, tokens, leaseSeconds]);
  const held = new Array<boolean>(claims.length).fill(false);
  for (const r of res.rows) held[Number(r.n) - 1] = true;
  return held;
}

const HAND_BACK = statement('outbox-hand-back', handBackStatement(OUTBOX));

/**
 * Messages claimed but never started go back as they were (attempt not counted, due at once, in
 * their place in the queue), so another worker need not wait for the lease to end: at shutdown,
 * and for a prefetched message that waited locally so long that too little of its lease was left
 * to start it safely.
 * Returns how many were handed back.
 */
export async function handBack(q: Executor, claims: readonly Claim[]): Promise<number> {
  if (claims.length === 0) return 0;
  const [ids, tokens] = arrays(claims);
  const res = await execute(q, HAND_BACK, [ids, tokens]);
  const handedBack = res.rowCount ?? 0;
  // The wake-up after it: its messages are due again at once, and nothing else would tell the
  // other workers, whose poll walks only the messages without a turn while full walks are dear
  // (src/outbox/runner/poll-walks.ts). It names nothing, so every worker woken walks.
  if (handedBack > 0) await wakeUpSaying(q, 'hand-back');
  return handedBack;
}
