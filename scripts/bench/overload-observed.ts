import { withClient } from '../lib/postgres.ts';
import { bookingEventsSince } from './lib/outbox.ts';
import { percentile, round } from './lib/stats.ts';

/*
 * What the overload section reads besides the clients' answers: the database's clock and what it
 * kept, and the API's own load signals from /metrics.
 */

export const dbNow = (url: string) =>
  withClient(url, async (c) => (await c.query<{ now: string }>('select now()::text as now')).rows[0]!.now);

/**
 * What the database holds of bookings made since `since`: each booking with its property and
 * check-in, and how many booking.created originals (lane copies left out) the outbox holds for it.
 * Waits first until the API has settled (no new booking in a second): requests the clients gave up
 * on may still be running.
 */
export const keptSince = (url: string, since: string) =>
  withClient(url, async (c) => {
    let last = -1;
    for (let i = 0; i < 60; i++) {
      const { rows } = await c.query<{ n: number }>('select count(*)::int as n from bookings where created_at >= $1', [since]);
      if (rows[0]!.n === last) break;
      last = rows[0]!.n;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const { rows } = await c.query<{ id: string; property: string; check_in: string }>(
      `select b.public_id::text as id, p.public_id::text as property, b.check_in::text as check_in
         from bookings b
         join properties p on p.id = b.property_id
        where b.created_at >= $1`,
      [since],
    );
    const events = await bookingEventsSince(c, since);
    return rows.map((r) => ({ ...r, emails: events.get(r.id) ?? 0 }));
  });

/**
 * Scrapes the API's load signals (event-loop delay, the main pool's expected wait) from /metrics
 * every half second until stopped: what the thresholds are chosen against (ADR 0034).
 */
export function traceSignals(baseUrl: string) {
  const delay: number[] = [];
  const wait: number[] = [];
  let on = true;
  const gauge = (text: string, series: string) => {
    const l = text.split('\n').find((x) => x.startsWith(`${series} `));
    return l === undefined ? Number.NaN : 1000 * Number(l.slice(series.length + 1));
  };
  const loop = (async () => {
    while (on) {
      try {
        const text = await (await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
        delay.push(gauge(text, 'stayhub_http_event_loop_delay_seconds'));
        wait.push(gauge(text, 'stayhub_http_pool_expected_wait_seconds{pool="main"}'));
      } catch {
        /* a scrape that failed under load is a missing sample */
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  })();
  const stat = (v: number[], p: number) => round(percentile(v.filter(Number.isFinite), p), 1);
  return async () => {
    on = false;
    await loop;
    return {
      eventLoopDelayP50: stat(delay, 50),
      eventLoopDelayMax: stat(delay, 100),
      poolWaitP50: stat(wait, 50),
      poolWaitMax: stat(wait, 100),
    };
  };
}

/** The API's stayhub_http_shed_requests_total by "class/signal" (cumulative over the API's life), the non-zero ones. */
export async function shedCounts(baseUrl: string): Promise<Record<string, number>> {
  const shed: Record<string, number> = {};
  const metrics = await (await fetch(`${baseUrl}/metrics`)).text();
  for (const m of metrics.matchAll(/^stayhub_http_shed_requests_total\{class="(\w+)",signal="(\w+)"\} (\d+)/gm)) {
    if (Number(m[3]) > 0) shed[`${m[1]}/${m[2]}`] = Number(m[3]);
  }
  return shed;
}
