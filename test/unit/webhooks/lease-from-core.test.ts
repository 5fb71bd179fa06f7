import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { matchingCodeLines as offendingLines, repoRoot as root, sourceFiles } from '../../helpers/source-lines.ts';

/*
 * One lease for every queue: the webhook deliveries are locked, leased, fenced, released and handed
 * back by the lease core in src/outbox/lease/ (docs/adr/0049-one-lease-core-for-two-queues.md),
 * so a fix to it is a fix to both. Outside src/outbox/, no SQL writes or fences on a claim token,
 * counts a claim's attempt, or locks rows for a claim: those are the core's. Reading the token
 * (`claim_id is null`: not in flight) is anyone's. Comments are left out.
 */

const LEASE_WRITES = [
  // setting or matching the fencing token: `claim_id = gen_random_uuid()`, `claim_id = null`, `and d.claim_id = $2`
  /\bclaim_id\s*=(?!=)/i,
  // the claim's attempt counted, or given back
  /\battempts\s*=\s*(greatest\s*\()?\s*(\w+\.)?attempts\s*[-+]/i,
];
/** Batch deletes (retention) lock with SKIP LOCKED too; only the delivery path must not lock of its own. */
const CLAIM_LOCK = /\bfor\s+(no\s+key\s+)?update\b.*\bskip\s+locked\b/i;

describe('leases are the lease core’s', () => {
  it('recognises lease SQL written by hand, and lets reads and other updates be', () => {
    for (const line of [
      '   set next_attempt_at = now() + make_interval(secs => $5), claim_id = gen_random_uuid(), attempts = d.attempts + 1',
      "   where id = ${d.id} and claim_id = ${d.claimId}::uuid and status = 'pending'",
      "  update webhook_deliveries set status = 'succeeded', claim_id = null",
      '   set next_attempt_at = u.due_at, attempts = greatest(d.attempts - 1, 0)',
    ]) {
      expect(offendingLines(line, LEASE_WRITES), line).toEqual([line]);
    }
    expect(offendingLines('     for update skip locked', [CLAIM_LOCK])).toHaveLength(1);
    for (const line of [
      '     where id = ${id} and claim_id is null',
      "  where d.status = 'pending' and d.claim_id is not null) as in_flight",
      '  claim_id: string | null;',
      '     set status = pending, attempts = 0, next_attempt_at = now()',
      ' * the fence `claim_id = $token` makes its update match nothing',
    ]) {
      expect(offendingLines(line, LEASE_WRITES), line).toEqual([]);
    }
  });

  it('no SQL outside src/outbox/ sets, fences on or counts a claim', () => {
    const offenders = sourceFiles('src')
      .filter((f) => !f.startsWith('src/outbox/'))
      .flatMap((f) => offendingLines(readFileSync(path.join(root, f), 'utf8'), LEASE_WRITES).map((l) => `${f}: ${l.trim()}`));
    expect(offenders).toEqual([]);
  });

  it('the webhook delivery folder locks no row of its own', () => {
    const files = sourceFiles('src/webhooks/delivery');
    expect(files).toContain('src/webhooks/delivery/claim.ts');
    const offenders = files.flatMap((f) =>
      offendingLines(readFileSync(path.join(root, f), 'utf8'), [CLAIM_LOCK]).map((l) => `${f}: ${l.trim()}`),
    );
    expect(offenders).toEqual([]);
  });
});
