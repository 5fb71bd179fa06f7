import type pg from 'pg';
import { batchFence, fence, handBackStatement, lockChosen, takeLease, type LeasedTable } from '../../outbox/index.ts';

/** One delivery, claimed: everything an attempt needs, read in the claim's own statement. */
export interface ClaimedDelivery {
  id: number;
  /** Sent as `webhook-id`. */
  publicId: string;
  claimId: string;
  /** Attempts in this round, this one included. */
  attempt: number;
  endpointId: number;
  endpointPublicId: string;
  hostId: number;
  url: string;
  /** The secrets that sign: the current one, then every rotated-out one while its overlap lasts. */
  secrets: string[];
  eventType: string;
  body: string;
  /** When it fell due (ms since the epoch), before the claim moved next_attempt_at to the lease: the local queue's order. */
  dueAt: number;
  /**
   * How long after the claim it may start, ms: its place in its endpoint's rate schedule (0 for an
   * endpoint without a rate). Relative to the database's clock at the claim, so a worker whose
   * clock differs still keeps the spacing.
   */
  startInMs?: number;
  /** The endpoint's rate at the claim, attempts per second; absent: no limit. */
  rate?: number;
  /** The trace context of the fan-out that made the delivery; null when tracing was off then. */
  traceparent: string | null;
  tracestate: string | null;
}

/**
 * The deliveries as the lease core sees them (src/outbox/lease/leased-table.ts): the lease sits in
 * next_attempt_at itself, so a claimed delivery drops out of the due index's range until its lease
 * ends, and a hand-back puts it back where it was.
 */
export const DELIVERIES: LeasedTable = { table: 'webhook_deliveries', pending: 'pending', due: 'next_attempt_at', leaseColumn: null };

/** The fence of every write of a claimed delivery (src/webhooks/delivery/record.ts). */
export const deliveryFence = (alias: string | undefined, id: string, token: string) => fence(DELIVERIES, alias, id, token);
/** The fence of a batched write: `batch` has columns id and claim_id (the lease core's batchFence says why it is written so). */
export const deliveryBatchFence = (alias: string, batch: string) => batchFence(DELIVERIES, alias, batch);

/*
 * The claim, shared fairly between hosts: which due deliveries it takes, in what order, is the
 * webhooks' own policy (below); the lock and the lease are the lease core's, the outbox's own
 * (lockChosen, takeLease: src/outbox/lease/leased-table.ts).
 *
 * 1. capacity: each enabled endpoint's room, what it may hold claimed (the sender's local queue:
 *    WEBHOOK_ENDPOINT_CONCURRENCY times the claim-ahead factor) minus what it holds in this process
 *    now, in flight or queued.
 * 2. due: each endpoint's first due deliveries up to its room, probed per endpoint (LATERAL over
 *    the partial index webhook_deliveries_due_idx): an endpoint with ten thousand deliveries
 *    waiting contributes at most its room.
 * 3. turns: round robin between hosts. Each host's due deliveries are numbered oldest first
 *    (turn 1, 2, …), cut at the host's own room (WEBHOOK_HOST_CONCURRENCY times the claim-ahead
 *    factor, minus what its endpoints hold), and the claim takes turn 1 of every host, then turn 2, … up to the free slots.
 *    A host's hanging endpoints, however many, hold at most its own room, and its backlog cannot
 *    push another host's first due delivery out of a claim: they cost that host, not the others
 *    (docs/adr/0030-webhook-slots-shared-between-hosts.md). Within a turn the oldest due goes first.
 * 4. newcomers: a host (the owner of the endpoints) holding nothing claimed in this process has its
 *    first due delivery taken before every other, and with `newcomersOnly` (the claim-ahead room
 *    spent by other hosts' backlogs) only such first deliveries are taken: a quiet host's delivery
 *    reaches the local queue, and a slot kept for it, without waiting for the others' timeouts
 *    (docs/adr/0040-webhook-slots-fair-between-owners.md).
 *
 * 5. rate: an endpoint with a rate (rate_limit_per_second) has a schedule, rate_next_at, the
 *    earliest its next attempt may start. Its room is cut to what the schedule admits within the
 *    next second, and the deliveries locked are given start times 1/rate apart from there, read and
 *    moved forward under the endpoint row's lock in this same statement: claims of several workers
 *    take turns on the schedule, so the rate holds across processes, at no extra round trip. What
 *    would start a second or more from now is left pending, unclaimed, its attempts not counted
 *    (docs/adr/0047-webhook-rate-per-endpoint.md).
 *
 * The lock (FOR UPDATE SKIP LOCKED) makes claims of several worker processes disjoint; the claim moves
 * next_attempt_at to the lease deadline, so a worker killed mid-attempt leaves a delivery that is
 * due again when the lease ends, and is sent again with the same webhook-id.
 */
export const DELIVERY_CLAIM_SQL = `
with host_busy as (
  select * from unnest($7::bigint[], $8::int[]) as b(host_id, n)
),
capacity as (
  select e.id as endpoint_id, e.host_id,
         least($1::int - coalesce(busy.n, 0),
               -- no more than the rate admits within the next second (checked again, under the lock, below)
               ceil(extract(epoch from now() + interval '1 second' - greatest(e.rate_next_at, now()))
                    * e.rate_limit_per_second)::int) as room
    from webhook_endpoints e
    left join unnest($2::bigint[], $3::int[]) as busy(endpoint_id, n) on busy.endpoint_id = e.id
   where e.enabled
     -- a host with no room left is not probed at all
     and e.host_id not in (select host_id from host_busy where n >= $6::int)
     -- nor, when only newcomers may be claimed, a host holding anything
     and not ($9::boolean and e.host_id in (select host_id from host_busy))
),
due as (
  select d.id, d.next_attempt_at, c.host_id
    from capacity c
    cross join lateral (
      select id, next_attempt_at
        from webhook_deliveries
       where endpoint_id = c.endpoint_id and status = 'pending' and next_attempt_at <= now()
       order by next_attempt_at, id
       limit greatest(c.room, 0)
    ) d
),
turns as (
  select due.id, due.next_attempt_at,
         row_number() over (partition by due.host_id order by due.next_attempt_at, due.id) as turn,
         $6::int - coalesce(host_busy.n, 0) as host_room,
         host_busy.n is null as idle_host
    from due
    left join host_busy on host_busy.host_id = due.host_id
),
chosen as (
  select id from turns
   where turn <= host_room and (not $9::boolean or turn = 1)
   order by (idle_host and turn = 1) desc, turn, next_attempt_at, id
   limit $4
),
locked as (
  ${lockChosen(DELIVERIES, 'w', 'w.id, w.endpoint_id, w.next_attempt_at as due_at', 'select id from chosen')}
),
-- Waits for another claim holding the same endpoint's schedule, then reads the schedule it left.
-- NO KEY UPDATE: a fan-out inserting deliveries (KEY SHARE on the endpoint) is not held up.
paced as (
  select e.id, e.rate_limit_per_second as rate, greatest(e.rate_next_at, now()) as base
    from webhook_endpoints e
   where e.id in (select endpoint_id from locked) and e.rate_limit_per_second is not null
     for no key update
),
slotted as (
  select l.id, l.endpoint_id, l.due_at, p.rate,
         extract(epoch from p.base - now())::double precision
           + (row_number() over (partition by l.endpoint_id order by l.due_at, l.id) - 1) / p.rate::double precision as start_in
    from locked l
    left join paced p on p.id = l.endpoint_id
),
admitted as (
  select * from slotted where start_in is null or start_in < 1
),
scheduled as (
  update webhook_endpoints e
     set rate_next_at = now() + make_interval(secs => s.last_start + 1 / s.rate::double precision)
    from (select endpoint_id, max(start_in) as last_start, min(rate) as rate
            from admitted where rate is not null group by endpoint_id) s
   where e.id = s.endpoint_id
)
update webhook_deliveries d
   set ${takeLease(DELIVERIES, 'd', 'gen_random_uuid()', '$5::double precision')}
  from admitted locked, webhook_endpoints e, webhook_events ev,
       -- asynchronous commit (ADR 0005, as the outbox's claim): a claim lost in a database crash
       -- leaves the delivery due as before it, to be sent again with the same webhook-id
       (select set_config('synchronous_commit', 'off', true)) as async_commit
 where d.id = locked.id and e.id = d.endpoint_id and ev.id = d.event_id
returning d.id, d.public_id, d.claim_id, d.attempts, d.endpoint_id, e.host_id, e.public_id as endpoint_public_id, e.url,
          -- the current secret first, then every retired one whose overlap has not ended
          array(select e.secret
                union all
                select s->>'secret' from jsonb_array_elements(e.retired_secrets) s
                 where (s->>'expiresAt')::timestamptz > now()) as secrets,
          ev.type, ev.body, d.traceparent, d.tracestate, locked.due_at, coalesce(locked.start_in, 0) as start_in,
          locked.rate`;

export async function claimDeliveries(
  pool: pg.Pool,
  opts: {
    limit: number;
    /** What an endpoint, and a host, may hold claimed at once in this process. */
    perEndpoint: number;
    perHost: number;
    /** Claimed in this process and not finished (in flight or queued), by endpoint and by host (internal ids). */
    claimed: ReadonlyMap<number, number>;
    hostClaimed: ReadonlyMap<number, number>;
    leaseSeconds: number;
    /** Only the first due delivery of hosts holding nothing claimed (the claim-ahead room is spent). */
    newcomersOnly?: boolean;
  },
): Promise<ClaimedDelivery[]> {
  if (opts.limit <= 0) return [];
  const busy = [...opts.claimed].filter(([, n]) => n > 0);
  const hostBusy = [...opts.hostClaimed].filter(([, n]) => n > 0);
  const { rows } = await pool.query<{
    id: string;
    public_id: string;
    claim_id: string;
    attempts: number;
    endpoint_id: string;
    host_id: string;
    endpoint_public_id: string;
    url: string;
    secrets: string[];
    type: string;
    body: string;
    traceparent: string | null;
    tracestate: string | null;
    due_at: Date;
    start_in: number;
    rate: number | null;
  }>({
    // Named: each connection parses and plans it once, not on every claim.
    name: 'webhooks-claim',
    text: DELIVERY_CLAIM_SQL,
    values: [
      opts.perEndpoint,
      busy.map(([id]) => id),
      busy.map(([, n]) => n),
      opts.limit,
      opts.leaseSeconds,
      opts.perHost,
      hostBusy.map(([id]) => id),
      hostBusy.map(([, n]) => n),
      opts.newcomersOnly ?? false,
    ],
  });
  return rows.map((r) => ({
    id: Number(r.id),
    publicId: r.public_id,
    claimId: r.claim_id,
    attempt: r.attempts,
    endpointId: Number(r.endpoint_id),
    endpointPublicId: r.endpoint_public_id,
    hostId: Number(r.host_id),
    url: r.url,
    secrets: r.secrets,
    eventType: r.type,
    body: r.body,
    dueAt: r.due_at.getTime(),
    ...(r.rate === null ? {} : { rate: r.rate, startInMs: Math.max(0, r.start_in * 1000) }),
    traceparent: r.traceparent,
    tracestate: r.tracestate,
  }));
}

/*
 * Gives claimed deliveries back that were never attempted (the sender stopped, their endpoint was
 * disabled, or they waited in the local queue past what their lease covers): the lease core's
 * hand-back, due again when they were due before the claim (so they keep their place among the
 * others), the claim's attempt count undone, fenced on the claim.
 */
const HAND_BACK_SQL = handBackStatement(DELIVERIES);

export async function handBackDeliveries(pool: pg.Pool, deliveries: readonly ClaimedDelivery[]): Promise<number> {
  if (deliveries.length === 0) return 0;
  const res = await pool.query({
    name: 'webhooks-hand-back',
    text: HAND_BACK_SQL,
    values: [deliveries.map((d) => d.id), deliveries.map((d) => d.claimId), deliveries.map((d) => new Date(d.dueAt))],
  });
  return res.rowCount ?? 0;
}
