import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';

/** Each endpoint's health, as the metrics and the admin view read it. */
export interface EndpointStats {
  endpointId: string;
  enabled: boolean;
  pending: number;
  /** Age of the oldest pending delivery (since it was created), 0 when none. */
  oldestPendingSeconds: number;
  /** Since the first failure after the last success; 0 when the last attempt succeeded, or the endpoint is disabled. */
  failingSeconds: number;
  failed: number;
}

/**
 * One statement: the pending ones through webhook_deliveries_due_idx (partial, small), the failed
 * ones by the endpoint index. Endpoints disabled by a person with nothing pending or failed are
 * left out: there is nothing to watch. At most `limit` endpoints, the ones worth watching first:
 * failing, then disabled by the system, then the most pending. With one series per endpoint and
 * no limit, 10,000 endpoints made /metrics 4.7 MB and 50,025 series.
 */
export async function webhookStats(db: Db, limit: number): Promise<EndpointStats[]> {
  const { rows } = await db.execute<{
    public_id: string;
    enabled: boolean;
    pending: number;
    oldest: number | null;
    failing: number | null;
    failed: number;
  }>(sql`
    select e.public_id, e.enabled,
           coalesce(p.n, 0)::int as pending,
           extract(epoch from now() - p.oldest)::float8 as oldest,
           -- A disabled endpoint is not "failing": nothing is tried, and its host has been told.
           case when e.enabled then extract(epoch from now() - e.failing_since)::float8 end as failing,
           (select count(*)::int from webhook_deliveries f where f.endpoint_id = e.id and f.status = 'failed') as failed
      from webhook_endpoints e
      left join lateral (
        select count(*) as n, min(d.created_at) as oldest
          from webhook_deliveries d where d.endpoint_id = e.id and d.status = 'pending'
      ) p on true
     where e.enabled or e.disabled_reason is not null or p.n > 0
     order by (e.enabled and e.failing_since is not null) desc, (not e.enabled and e.disabled_reason is not null) desc,
              coalesce(p.n, 0) desc, e.id
     limit ${limit}`);
  return rows.map((r) => ({
    endpointId: r.public_id,
    enabled: r.enabled,
    pending: r.pending,
    oldestPendingSeconds: r.oldest ?? 0,
    failingSeconds: r.failing ?? 0,
    failed: r.failed,
  }));
}
