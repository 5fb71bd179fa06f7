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
  url: string;
  /** The secrets that sign: the current one, and the one before a rotation while it overlaps. */
  secrets: string[];
  eventType: string;
  body: string;
}

/*
 * The claim. For each enabled endpoint, its first due deliveries up to what it may still have in
 * flight in this process (WEBHOOK_ENDPOINT_CONCURRENCY minus those it has now), then the earliest
 * due of all those, up to the free slots. Probing per endpoint (LATERAL over the partial index
 * webhook_deliveries_due_idx) is what isolates endpoints: a hanging endpoint with ten thousand
 * deliveries waiting contributes at most its share to each claim, so it can never fill a claim and
 * starve the endpoints behind it, as one "ORDER BY next_attempt_at LIMIT n" over all of them would.
 *
 * FOR UPDATE SKIP LOCKED makes claims of several worker processes disjoint; the claim moves
 * next_attempt_at to the lease deadline, so a worker killed mid-attempt leaves a delivery that is
 * due again when the lease ends, and is sent again with the same webhook-id.
 */
const CLAIM_SQL = `
with capacity as (
  select e.id as endpoint_id, $1::int - coalesce(busy.n, 0) as room
    from webhook_endpoints e
    left join unnest($2::bigint[], $3::int[]) as busy(endpoint_id, n) on busy.endpoint_id = e.id
   where e.enabled
),
due as (
  select d.id, d.next_attempt_at
    from capacity c
    cross join lateral (
      select id, next_attempt_at
        from webhook_deliveries
       where endpoint_id = c.endpoint_id and status = 'pending' and next_attempt_at <= now()
       order by next_attempt_at, id
       limit greatest(c.room, 0)
    ) d
   order by d.next_attempt_at, d.id
   limit $4
),
locked as (
  select w.id
    from webhook_deliveries w
   where w.id in (select id from due) and w.status = 'pending' and w.next_attempt_at <= now()
     for update skip locked
)
update webhook_deliveries d
   set next_attempt_at = now() + make_interval(secs => $5::double precision),
       claim_id = gen_random_uuid(),
       attempts = d.attempts + 1
  from locked, webhook_endpoints e, webhook_events ev
 where d.id = locked.id and e.id = d.endpoint_id and ev.id = d.event_id
returning d.id, d.public_id, d.claim_id, d.attempts, d.endpoint_id, e.public_id as endpoint_public_id, e.url,
          e.secret, case when e.previous_secret_expires_at > now() then e.previous_secret end as previous_secret,
          ev.type, ev.body`;

export async function claimDeliveries(
  pool: pg.Pool,
  opts: { limit: number; perEndpoint: number; inFlight: ReadonlyMap<number, number>; leaseSeconds: number },
): Promise<ClaimedDelivery[]> {
  if (opts.limit <= 0) return [];
  const busy = [...opts.inFlight].filter(([, n]) => n > 0);
  const { rows } = await pool.query<{
    id: string;
    public_id: string;
    claim_id: string;
    attempts: number;
    endpoint_id: string;
    endpoint_public_id: string;
    url: string;
    secret: string;
    previous_secret: string | null;
    type: string;
    body: string;
  }>({
    // Named: each connection parses and plans it once, not on every claim.
    name: 'webhooks-claim',
    text: CLAIM_SQL,
    values: [opts.perEndpoint, busy.map(([id]) => id), busy.map(([, n]) => n), opts.limit, opts.leaseSeconds],
  });
  return rows.map((r) => ({
    id: Number(r.id),
    publicId: r.public_id,
    claimId: r.claim_id,
    attempt: r.attempts,
    endpointId: Number(r.endpoint_id),
    endpointPublicId: r.endpoint_public_id,
    url: r.url,
    secrets: r.previous_secret ? [r.secret, r.previous_secret] : [r.secret],
    eventType: r.type,
    body: r.body,
  }));
}
