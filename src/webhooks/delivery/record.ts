import { sql } from 'drizzle-orm';
import type pg from 'pg';
import type { Db } from '../../db/client.ts';
import { redactUrl } from '../redact-url.ts';
import { withTransaction } from '../../db/transaction.ts';
import { enqueueTopic } from '../../messages/enqueue.ts';
import { activeTraceId } from '../../telemetry/tracing.ts';
import { release } from '../../outbox/index.ts';
import { DELIVERIES, deliveryBatchFence, deliveryFence, type ClaimedDelivery } from './claim.ts';
import type { ExchangedHeaders } from './exchanged-headers.ts';
import type { AttemptVerdict } from './schedule.ts';
import type { AttemptResult } from './send.ts';

export interface RecordOptions {
  /** WEBHOOK_DISABLE_AFTER_HOURS */
  disableAfterHours: number;
  /** WEBHOOK_ATTEMPTS_KEPT: the newest attempts kept per delivery; older ones are deleted as new ones come. */
  attemptsKept: number;
}

/**
 * Text a receiver sent, made storable. PostgreSQL's text cannot hold 0x00: one NUL in an answer
 * made the attempt's insert fail, so nothing was recorded, and the delivery went out again at
 * every lease for ever. Invalid UTF-8 is already U+FFFD (Buffer#toString); NUL becomes U+FFFD too.
 */
export function storable(text: string | null): string | null {
  return text === null ? null : text.replaceAll('\u0000', '\uFFFD');
}

/**
 * webhook_attempts.headers: what the request was signed with and what the answer's head said, as
 * JSON text (cast to jsonb in the insert). Null for a result that carries neither.
 */
export function exchangedHeaders(result: AttemptResult): string | null {
  if (!result.requestHeaders && !result.responseHeaders) return null;
  const headers: ExchangedHeaders = { request: result.requestHeaders ?? null, response: result.responseHeaders ?? null };
  return JSON.stringify(headers);
}

/*
 * Keeps a delivery's history at `kept` attempts: deletes the ones older than the kept-1 newest that
 * existed before this statement (the attempt the same statement inserts is the kept-th). Retries
 * and recovers add rounds without end; without this one delivery's page grew to megabytes.
 */
const trimAttempts = (deliveryId: number, kept: number) => sql`
  delete from webhook_attempts
   where delivery_id = ${deliveryId}
     and id <= (select id from webhook_attempts where delivery_id = ${deliveryId} order by id desc offset ${Math.max(kept - 1, 0)} limit 1)`;

/*
 * A claimed delivery's writes go through the lease core's fence and release, as the outbox's
 * settles do (src/outbox/lease/leased-table.ts): the claim to match comes in as a one-row `claim`.
 */
const FENCED_ON_CLAIM = sql.raw(deliveryFence('d', 'claim.id', 'claim.claim_id'));
const RELEASE = sql.raw(release(DELIVERIES));

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
  verdict: AttemptVerdict,
  opts: RecordOptions,
): Promise<Recorded> {
  if (verdict.kind === 'succeeded') return recordSuccess(db, d, result, opts);
  return withTransaction(db, async (tx) => {
    await tx.execute(trimAttempts(d.id, opts.attemptsKept));
    await tx.execute(sql`
      insert into webhook_attempts (delivery_id, response_status, duration_ms, response_body, error, trace_id, headers)
      values (${d.id}, ${result.status}, ${result.durationMs}, ${storable(result.body)}, ${storable(result.error)}, ${activeTraceId()},
              ${exchangedHeaders(result)}::jsonb)`);

    const state =
      verdict.kind === 'retry'
        ? sql`next_attempt_at = now() + make_interval(secs => ${verdict.delaySeconds}::double precision), ${RELEASE}`
        : sql`status = 'failed', finished_at = now(), ${RELEASE}`;
    const settled = await tx.execute(sql`
      update webhook_deliveries d set ${state}
        from (select ${d.id}::bigint as id, ${d.claimId}::uuid as claim_id) claim
       where ${FENCED_ON_CLAIM}
      returning d.id`);

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
      await enqueueTopic(
        tx,
        'webhook.endpoint-disabled',
        {
          endpointId: h.public_id,
          url: redactUrl(h.url),
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

/** A successful attempt waiting to be recorded with others (recordSuccesses). */
export interface Success {
  d: ClaimedDelivery;
  result: AttemptResult;
  /** The attempt's trace (its span is over by the time the batch is written); null when tracing is off. */
  traceId: string | null;
}

/*
 * Successes in one statement for many deliveries: the sender's group commit (a DoneBatcher, as the
 * outbox's DONE): every success that finished while the previous write was in flight goes into
 * the next. The same writes as recordSuccess, row for row: each delivery's attempts trimmed, its
 * attempt inserted, the delivery settled fenced on its claim, and each endpoint's health once.
 * Asynchronous commit, as recordSuccess. Returns, per success, whether its claim still held.
 *
 * Each delivery is reached through its primary key (`d.id = any($1)`, and the lease core's batch
 * fence, whose status test the planner cannot match to the pending index). With the single-row
 * fence, statistics taken while few deliveries were pending made the plan read every pending
 * delivery through that index once per batch: a backlog of 5,000 cost each batch 5,000 rows, and
 * PostgreSQL's CPU per delivery fell by a fifth when it stopped
 * (test/integration/webhooks/record-successes.test.ts).
 */
const RECORD_SUCCESSES_SQL = `
with input as (
  select * from unnest($1::bigint[], $2::uuid[], $3::bigint[], $4::int[], $5::int[], $6::text[], $8::text[], $9::text[])
    as i(delivery_id, claim_id, endpoint_id, status, duration_ms, body, trace_id, headers)
),
trimmed as (
  delete from webhook_attempts a
   using input i
   where a.delivery_id = i.delivery_id
     and a.id <= (select id from webhook_attempts where delivery_id = i.delivery_id order by id desc offset $7 limit 1)
),
attempt as (
  insert into webhook_attempts (delivery_id, response_status, duration_ms, response_body, error, trace_id, headers)
  select delivery_id, status, duration_ms, body, null, trace_id, headers::jsonb from input
),
delivery as (
  update webhook_deliveries d set status = 'succeeded', finished_at = now(), ${release(DELIVERIES)}
    from (select delivery_id as id, claim_id from input) i
   where d.id = any($1::bigint[]) and ${deliveryBatchFence('d', 'i')}
  returning d.id
),
endpoint as (
  update webhook_endpoints set failing_since = null, last_success_at = now()
   where id in (select endpoint_id from input)
     and (failing_since is not null or last_success_at is null or last_success_at < now() - interval '1 second')
)
select array(select id from delivery)::bigint[] as settled
  from (select set_config('synchronous_commit', 'off', true)) as async_commit`;

export async function recordSuccesses(pool: pg.Pool, items: readonly Success[], attemptsKept: number): Promise<boolean[]> {
  const { rows } = await pool.query<{ settled: string[] }>({
    name: 'webhooks-record-successes',
    text: RECORD_SUCCESSES_SQL,
    values: [
      items.map((s) => s.d.id),
      items.map((s) => s.d.claimId),
      items.map((s) => s.d.endpointId),
      items.map((s) => s.result.status),
      items.map((s) => s.result.durationMs),
      items.map((s) => storable(s.result.body)),
      Math.max(attemptsKept - 1, 0),
      items.map((s) => s.traceId),
      items.map((s) => exchangedHeaders(s.result)),
    ],
  });
  const settled = new Set((rows[0]?.settled ?? []).map(Number));
  return items.map((s) => settled.has(s.d.id));
}

/**
 * A success, the common case, in one statement: the attempt, the delivery (fenced), and the
 * endpoint's health only when it changes (a failing endpoint recovers, or last_success_at is a
 * second old): successes of one endpoint then do not queue on its row lock one commit after another.
 *
 * Committed asynchronously (synchronous_commit off for this statement's transaction only, as the
 * outbox worker's own writes: docs/adr/0005-asynchronous-commit-for-worker-writes.md). A database
 * crash can lose the last moment of these writes; the delivery is then pending under its old claim
 * and is sent again after its lease, with the same webhook-id: a duplicate the receiver's
 * idempotency on webhook-id absorbs, never a loss.
 */
async function recordSuccess(db: Db, d: ClaimedDelivery, result: AttemptResult, opts: RecordOptions): Promise<Recorded> {
  const { rows } = await db.execute<{ settled: number }>(sql`
    with trimmed as (${trimAttempts(d.id, opts.attemptsKept)}),
    attempt as (
      insert into webhook_attempts (delivery_id, response_status, duration_ms, response_body, error, trace_id, headers)
      values (${d.id}, ${result.status}, ${result.durationMs}, ${storable(result.body)}, null, ${activeTraceId()}, ${exchangedHeaders(result)}::jsonb)
    ),
    delivery as (
      update webhook_deliveries d set status = 'succeeded', finished_at = now(), ${RELEASE}
        from (select ${d.id}::bigint as id, ${d.claimId}::uuid as claim_id) claim
       where ${FENCED_ON_CLAIM}
      returning d.id
    ),
    endpoint as (
      update webhook_endpoints set failing_since = null, last_success_at = now()
       where id = ${d.endpointId}
         and (failing_since is not null or last_success_at is null or last_success_at < now() - interval '1 second')
    )
    select (select count(*)::int from delivery) as settled
      from (select set_config('synchronous_commit', 'off', true)) as async_commit`);
  return { settled: rows[0]?.settled === 1 };
}
