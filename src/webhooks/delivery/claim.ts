import type pg from 'pg';

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
  /** The trace context of the fan-out that made the delivery; null when tracing was off then. */
  traceparent: string | null;
  tracestate: string | null;
}

/*
 * The claim, shared fairly between hosts.
 *
 * 1. capacity: each enabled endpoint's room, WEBHOOK_ENDPOINT_CONCURRENCY minus what it has in
 *    flight in this process now.
 * 2. due: each endpoint's first due deliveries up to its room, probed per endpoint (LATERAL over
 *    the partial index webhook_deliveries_due_idx): an endpoint with ten thousand deliveries
 *    waiting contributes at most its room.
 * 3. turns: round robin between hosts. Each host's due deliveries are numbered oldest first
 *    (turn 1, 2, …), cut at the host's own room (WEBHOOK_HOST_CONCURRENCY minus what its endpoints
 *    have in flight), and the claim takes turn 1 of every host, then turn 2, … up to the free slots.
 *    A host's hanging endpoints, however many, hold at most its own room, and its backlog cannot
 *    push another host's first due delivery out of a claim: they cost that host, not the others
 *    (docs/adr/0030-webhook-slots-shared-between-hosts.md). Within a turn the oldest due goes first.
 *
 * FOR UPDATE SKIP LOCKED makes claims of several worker processes disjoint; the claim moves
 * next_attempt_at to the lease deadline, so a worker killed mid-attempt leaves a delivery that is
 * due again when the lease ends, and is sent again with the same webhook-id.
 */
const CLAIM_SQL = `
with host_busy as (
  select * from unnest($7::bigint[], $8::int[]) as b(host_id, n)
),
capacity as (
  select e.id as endpoint_id, e.host_id, $1::int - coalesce(busy.n, 0) as room
    from webhook_endpoints e
    left join unnest($2::bigint[], $3::int[]) as busy(endpoint_id, n) on busy.endpoint_id = e.id
   where e.enabled
     -- a host with no room left is not probed at all
     and e.host_id not in (select host_id from host_busy where n >= $6::int)
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
         $6::int - coalesce(host_busy.n, 0) as host_room
    from due
    left join host_busy on host_busy.host_id = due.host_id
),
chosen as (
  select id from turns where turn <= host_room order by turn, next_attempt_at, id limit $4
),
locked as (
  select w.id
    from webhook_deliveries w
   where w.id in (select id from chosen) and w.status = 'pending' and w.next_attempt_at <= now()
     for update skip locked
)
update webhook_deliveries d
   set next_attempt_at = now() + make_interval(secs => $5::double precision),
       claim_id = gen_random_uuid(),
       attempts = d.attempts + 1
  from locked, webhook_endpoints e, webhook_events ev
 where d.id = locked.id and e.id = d.endpoint_id and ev.id = d.event_id
returning d.id, d.public_id, d.claim_id, d.attempts, d.endpoint_id, e.host_id, e.public_id as endpoint_public_id, e.url,
          -- the current secret first, then every retired one whose overlap has not ended
          array(select e.secret
                union all
                select s->>'secret' from jsonb_array_elements(e.retired_secrets) s
                 where (s->>'expiresAt')::timestamptz > now()) as secrets,
          ev.type, ev.body, d.traceparent, d.tracestate`;

export async function claimDeliveries(
  pool: pg.Pool,
  opts: {
    limit: number;
    perEndpoint: number;
    perHost: number;
    /** In flight in this process, by endpoint and by host (internal ids). */
    inFlight: ReadonlyMap<number, number>;
    hostInFlight: ReadonlyMap<number, number>;
    leaseSeconds: number;
  },
): Promise<ClaimedDelivery[]> {
  if (opts.limit <= 0) return [];
  const busy = [...opts.inFlight].filter(([, n]) => n > 0);
  const hostBusy = [...opts.hostInFlight].filter(([, n]) => n > 0);
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
  }>({
    // Named: each connection parses and plans it once, not on every claim.
    name: 'webhooks-claim',
    text: CLAIM_SQL,
    values: [
      opts.perEndpoint,
      busy.map(([id]) => id),
      busy.map(([, n]) => n),
      opts.limit,
      opts.leaseSeconds,
      opts.perHost,
      hostBusy.map(([id]) => id),
      hostBusy.map(([, n]) => n),
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
    traceparent: r.traceparent,
    tracestate: r.tracestate,
  }));
}
