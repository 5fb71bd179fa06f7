import type { Db } from '../db/client.ts';
import { executorOf, run, statement } from './executor.ts';
import { pendingRows } from './pending-rows.ts';

export interface TopicStats {
  topic: string;
  pending: number;
  leased: number;
  dead: number;
  doneLastHour: number;
  oldestPendingAgeSeconds: number | null;
}

export interface OutboxStats {
  /** PENDING rows, including leased ones and ones backing off. */
  pending: number;
  /** PENDING rows a worker holds right now (claimed, lease not yet expired). */
  leased: number;
  dead: number;
  doneLastHour: number;
  /** Age of the oldest PENDING message: the one number that says "the worker is stuck or dead". */
  oldestPendingAgeSeconds: number | null;
  byTopic: TopicStats[];
}

const BY_TOPIC = statement(
  'outbox-stats-by-topic',
  `with live as (
     select * from ${pendingRows('o.topic, o.status, o.created_at, o.claim_id, o.leased_until')} as pending
     union all
     select topic, status, created_at, claim_id, leased_until from outbox where status = 'DEAD'
     union all
     select topic, status, created_at, claim_id, leased_until from outbox
      where status = 'DONE' and processed_at > now() - interval '1 hour'
   )
   select topic,
          count(*) filter (where status = 'PENDING') as pending,
          count(*) filter (where status = 'PENDING' and claim_id is not null and leased_until > now()) as leased,
          count(*) filter (where status = 'DEAD') as dead,
          count(*) filter (where status = 'DONE') as done_last_hour,
          extract(epoch from now() - min(created_at) filter (where status = 'PENDING')) as oldest_pending_age
     from live
    group by topic
    order by topic`,
);

/**
 * One pass over the live rows (PENDING through the claim's two partial indexes, pending-rows.ts;
 * DEAD through its own partial index) and the last hour of DONE rows (through the BRIN index of
 * processed_at: in each day, only the pages whose summaries reach into the hour); it never scans
 * the DONE history. The age of the oldest PENDING message comes out of the same pass, per topic:
 * the counts read every PENDING row anyway, so no index on created_at would make it cheaper.
 */
export async function outboxStats(db: Db): Promise<OutboxStats> {
  const rows = await run<{
    topic: string;
    pending: string;
    leased: string;
    dead: string;
    done_last_hour: string;
    oldest_pending_age: string | null;
  }>(executorOf(db), BY_TOPIC, []);
  const byTopic: TopicStats[] = rows.map((r) => ({
    topic: r.topic,
    pending: Number(r.pending),
    leased: Number(r.leased),
    dead: Number(r.dead),
    doneLastHour: Number(r.done_last_hour),
    oldestPendingAgeSeconds: r.oldest_pending_age === null ? null : Math.round(Number(r.oldest_pending_age)),
  }));
  const sum = (k: 'pending' | 'leased' | 'dead' | 'doneLastHour') => byTopic.reduce((n, t) => n + t[k], 0);
  const ages = byTopic.map((t) => t.oldestPendingAgeSeconds).filter((a): a is number => a !== null);
  return {
    pending: sum('pending'),
    leased: sum('leased'),
    dead: sum('dead'),
    doneLastHour: sum('doneLastHour'),
    oldestPendingAgeSeconds: ages.length ? Math.max(...ages) : null,
    byTopic,
  };
}

const PENDING_UP_TO = statement(
  'outbox-pending-up-to',
  `select count(*)::int as n from (select 1 from ${pendingRows('1')} as pending limit $1) as p`,
);

/**
 * PENDING messages, counted no further than `cap`: the backlog the API's admission control
 * samples every few seconds. The limit bounds the cost however deep the backlog grows (the
 * count walks the claim's two partial indexes one after the other, pending-rows.ts, and stops at
 * `cap` entries in all); past the cap only "at least cap" matters.
 */
export async function pendingUpTo(db: Db, cap: number): Promise<number> {
  const [row] = await run<{ n: number }>(executorOf(db), PENDING_UP_TO, [cap]);
  return row?.n ?? 0;
}

const PROBE = statement('outbox-probe', 'select 1 from outbox limit 0');

/**
 * Whether the outbox table is there: a cheap probe a process runs at start, so that a database
 * that is unreachable or not migrated is one clear line rather than a retry loop. Throws the
 * driver's error (42P01: no outbox table, run the migrations).
 */
export async function probeOutbox(db: Db): Promise<void> {
  await run(executorOf(db), PROBE, []);
}
