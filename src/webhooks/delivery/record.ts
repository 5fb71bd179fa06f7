import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client.ts';
import { withTransaction } from '../../db/transaction.ts';
import { enqueue } from '../../outbox/index.ts';
import type { ClaimedDelivery } from './claim.ts';
import type { Verdict } from './schedule.ts';
import type { AttemptResult } from './send.ts';

export interface RecordOptions {
  /** WEBHOOK_DISABLE_AFTER_HOURS */
  disableAfterHours: number;
}

export interface Recorded {
  /** False when the lease ran out and another worker claimed the delivery meanwhile: only the attempt was kept. */
  settled: boolean;
  /** Set when this attempt disabled the endpoint. */
  disabled?: string;
}

/**
 * Writes what one attempt did, in one transaction:
 *   - the attempt itself (always: it happened, whoever holds the delivery now);
 *   - the delivery's new state, fenced on the claim (a worker whose lease ran out cannot overwrite
 *     the state a newer claim wrote, as the outbox's settles are fenced);
 *   - the endpoint's health: a success clears `failing_since`, a failure starts it;
 *   - when the endpoint must stop (410 Gone, or nothing but failures for disableAfterHours), it is
 *     disabled and its host's email is written to the outbox in this same transaction: the email
 *     goes if and only if the endpoint was disabled.
 */
export async function recordAttempt(
  db: Db,
  d: ClaimedDelivery,
  result: AttemptResult,
  verdict: Verdict,
  opts: RecordOptions,
): Promise<Recorded> {
  return withTransaction(db, async (tx) => {
    await tx.execute(sql`
      insert into webhook_attempts (delivery_id, response_status, duration_ms, response_body, error)
      values (${d.id}, ${result.status}, ${result.durationMs}, ${result.body}, ${result.error})`);

    const state =
      verdict.kind === 'succeeded'
        ? sql`status = 'succeeded', finished_at = now(), claim_id = null`
        : verdict.kind === 'retry'
          ? sql`next_attempt_at = now() + make_interval(secs => ${verdict.delaySeconds}::double precision), claim_id = null`
          : sql`status = 'failed', finished_at = now(), claim_id = null`;
    const settled = await tx.execute(sql`
      update webhook_deliveries set ${state}
       where id = ${d.id} and claim_id = ${d.claimId}::uuid and status = 'pending'
      returning id`);

    if (verdict.kind === 'succeeded') {
      await tx.execute(sql`
        update webhook_endpoints set failing_since = null, last_success_at = now() where id = ${d.endpointId}`);
      return { settled: settled.rows.length === 1 };
    }

    // A failure. Disable at once on 410; otherwise when failing_since is older than the limit.
    const { rows } = await tx.execute<{ disable_reason: string | null; was_enabled: boolean }>(sql`
      with failing as (
        update webhook_endpoints
           set failing_since = coalesce(failing_since, now()), last_failure_at = now()
         where id = ${d.endpointId}
        returning id, enabled, failing_since
      )
      select enabled as was_enabled,
             case
               when ${verdict.kind === 'gone'} then 'it answered 410 Gone'
               when failing_since <= now() - make_interval(hours => 0, secs => ${opts.disableAfterHours * 3600}::double precision)
                 then 'every delivery has failed for ' || ${String(opts.disableAfterHours)} || ' hours'
             end as disable_reason
        from failing`);
    const reason = rows[0]?.was_enabled ? rows[0].disable_reason : null;
    if (!reason) return { settled: settled.rows.length === 1 };

    const { rows: host } = await tx.execute<{ email: string; name: string; url: string; public_id: string }>(sql`
      update webhook_endpoints e
         set enabled = false, disabled_reason = ${reason}, updated_at = now()
        from users u
       where e.id = ${d.endpointId} and u.id = e.host_id and e.enabled
      returning u.email, u.name, e.url, e.public_id`);
    const h = host[0];
    if (h) {
      await enqueue(
        tx,
        'webhook.endpoint-disabled',
        {
          endpointId: h.public_id,
          url: h.url,
          hostEmail: h.email,
          hostName: h.name,
          reason,
          idempotencyKey: `webhook-disabled:${h.public_id}:${d.publicId}`,
        },
        { key: h.public_id },
      );
    }
    return { settled: settled.rows.length === 1, disabled: reason };
  });
}
