import { mkdirSync } from 'node:fs';
import path from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { startApi, type ApiFixture } from './api.ts';
import { percentile, repeatOf, round, type Repeated } from './lib/stats.ts';

/*
 * Overload: as many clients as the API cannot serve in time, half booking (POST /bookings, every
 * request a stay no other asked for) and half searching (GET /search), for a fixed time, against
 * two APIs started together on databases of their own: one refusing early (LOAD_SHEDDING=true, the
 * defaults) and one as the API was before it (LOAD_SHEDDING=false), runs alternating between them.
 *
 * Per run: the accepted bookings' latency (201s only: a refusal is quick by design and would flatter
 * the overall figures), the share of 503s, any other 5xx (must be 0), the 503s without Retry-After or
 * whose code is not `overloaded`, and what the database kept against what the clients were told:
 *   - lost: a 201 with no booking row, or with no booking.created message (its emails) in the outbox;
 *   - doubled: a booking row whose client was told anything but 201 (a retry would book it twice),
 *     or a stay answered 409 (every stay is asked for once, and again only after a 503);
 *   - unanswered: a row whose request was still in flight when the clients stopped (told nothing).
 *
 * A stay refused with 503 is asked for again by a later request: the refusal promised that nothing
 * was booked, and a 409 then would show that it was.
 */

export interface OverloadParams {
  connections: number[];
  seconds: number;
  runs: number;
  properties: number;
  guests: number;
  /** Smoke: a fixed number of requests per connection instead of `seconds`. */
  requestsPerConnection?: number;
}

export const OVERLOAD_FULL: OverloadParams = { connections: [50, 300, 1000], seconds: 10, runs: 3, properties: 300, guests: 32 };
export const OVERLOAD_SMOKE: OverloadParams = {
  connections: [8, 32],
  seconds: 1,
  runs: 1,
  properties: 10,
  guests: 4,
  requestsPerConnection: 3,
};

/** How the section runs, for the results' setup list. */
export const OVERLOAD_SETUP =
  'two APIs (node --import tsx src/http/server.ts, LOG_LEVEL=warn, defaults) started together on databases of their own, LOAD_SHEDDING=true and false; two autocannon instances in the bench process, half the connections POSTing /bookings (every stay new; a stay refused with 503 asked for again) and half GETting /search?city=Porto&limit=10; runs alternating between the APIs; accepted latency from the request built to its 201';

/** One run's figures (all numbers, so runs can be summarised by repeatOf). Latencies in ms. */
// A type, not an interface: repeatOf needs it to be a Record<string, number>.
export type OverloadRun = {
  bookingRequests: number;
  accepted: number;
  acceptedPerSecond: number;
  acceptedP50: number;
  acceptedP99: number;
  bookingShare503: number;
  searchRequests: number;
  searchOk: number;
  searchOkP99: number;
  searchShare503: number;
  /** All 503s over all answers, in %. */
  share503: number;
  other5xx: number;
  /** 503s without Retry-After. */
  noRetryAfter: number;
  /** 503s whose problem code is not `overloaded`. */
  not503Overloaded: number;
  /** Answers other than 201, 503 (bookings) and 200, 503 (search): none expected. */
  otherStatus: number;
  /** Requests that got no answer (client timeout, socket error). */
  errors: number;
  lost: number;
  doubled: number;
  unanswered: number;
  /** ms from the start to the first 503 of each route (-1: none). */
  firstBooking503: number;
  firstSearch503: number;
  /** The API's own signals, scraped from /metrics every half second during the run (ms): median and largest. */
  eventLoopDelayP50: number;
  eventLoopDelayMax: number;
  poolWaitP50: number;
  poolWaitMax: number;
};

/** What each 503 said, for a test to quote: code → count, and whether Retry-After was there. */
export interface OverloadDetail {
  codes503: Record<string, number>;
  /** The API's stayhub_http_shed_requests_total by "class/signal" after the run (cumulative over the API's life). */
  shed: Record<string, number>;
  statuses: { bookings: Record<string, number>; search: Record<string, number> };
}

interface Stay {
  propertyId: string;
  checkIn: string;
  checkOut: string;
}

/** 'YYYY-MM-DD', `days` from today (UTC): the service's calendar. */
function day(days: number): string {
  const d = new Date();
  d.setUTCDate(d.getUTCDate() + days);
  return d.toISOString().slice(0, 10);
}

/** Per fixture: the next stay never asked for, and stays refused with 503 to be asked for again. */
const slots = new WeakMap<ApiFixture, { next: number; free: number[] }>();

function stayOf(f: ApiFixture, n: number): Stay {
  const P = f.apiProperties.length;
  // Two nights, far from the api section's stays (days 1…) in case both ever share a fixture.
  const from = 20_000 + 2 * Math.floor(n / P);
  return { propertyId: f.apiProperties[n % P]!, checkIn: day(from), checkOut: day(from + 2) };
}

async function dbNow(url: string): Promise<string> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<{ now: string }>('select now()::text as now')).rows[0]!.now;
  } finally {
    await c.end();
  }
}

/**
 * What the database holds of bookings made since `since`: each booking with its property and
 * check-in, and how many booking.created originals (lane copies left out) the outbox holds for it.
 * Waits first until the API has settled (no new booking in a second): requests the clients gave up
 * on may still be running.
 */
async function keptSince(url: string, since: string) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    let last = -1;
    for (let i = 0; i < 60; i++) {
      const { rows } = await c.query<{ n: number }>('select count(*)::int as n from bookings where created_at >= $1', [since]);
      if (rows[0]!.n === last) break;
      last = rows[0]!.n;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const { rows } = await c.query<{ id: string; property: string; check_in: string; emails: number }>(
      `select b.public_id::text as id, p.public_id::text as property, b.check_in::text as check_in,
              coalesce(e.n, 0)::int as emails
         from bookings b
         join properties p on p.id = b.property_id
         left join (select payload->>'bookingId' as id, count(*) as n from outbox
                     where topic = 'booking.created' and lane is null and created_at >= $1
                     group by 1) e on e.id = b.public_id::text
        where b.created_at >= $1`,
      [since],
    );
    return rows;
  } finally {
    await c.end();
  }
}

/**
 * Scrapes the API's load signals (event-loop delay, the main pool's expected wait) from /metrics
 * every half second until stopped: what the thresholds are chosen against (ADR 0034).
 */
function traceSignals(baseUrl: string) {
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

/**
 * `connections` clients for `seconds` (or a fixed number of requests each), half on POST /bookings
 * and half on GET /search, against the API of `f`. Returns the run's figures and what the 503s said.
 */
export async function overloadLoad(
  f: ApiFixture,
  opts: { connections: number; seconds: number; requestsPerConnection?: number },
): Promise<OverloadRun & { detail: OverloadDetail }> {
  const slot = slots.get(f) ?? { next: 0, free: [] };
  slots.set(f, slot);
  const bookingConnections = Math.ceil(opts.connections / 2);
  const searchConnections = Math.max(1, opts.connections - bookingConnections);
  const since = await dbNow(f.url);
  const t0 = performance.now();

  const accepted: { id: string; ms: number; key: string }[] = [];
  /** The answer each stay got last (its key: property|check-in); absent while in flight. */
  const told = new Map<string, number>();
  const inFlight = new Set<string>();
  const codes503: Record<string, number> = {};
  const statuses = { bookings: {} as Record<string, number>, search: {} as Record<string, number> };
  let noRetryAfter = 0;
  let first503 = { bookings: -1, search: -1 };
  let searchOkMs: number[] = [];
  const count = (m: Record<string, number>, k: string | number) => (m[k] = (m[k] ?? 0) + 1);

  const on503 = (route: 'bookings' | 'search', body: string, headers: Record<string, string | string[]>) => {
    if (first503[route] < 0) first503 = { ...first503, [route]: performance.now() - t0 };
    if (headers['retry-after'] === undefined) noRetryAfter++;
    let code = 'unparsable';
    try {
      code = String((JSON.parse(body) as { code?: unknown }).code);
    } catch {
      /* counted as unparsable */
    }
    count(codes503, code);
  };

  const amount = (c: number) => (opts.requestsPerConnection ? { amount: c * opts.requestsPerConnection } : { duration: opts.seconds });
  const bookingRun = autocannon({
    url: `${f.baseUrl}/bookings`,
    connections: bookingConnections,
    ...amount(bookingConnections),
    timeout: 30,
    requests: [
      {
        method: 'POST',
        setupRequest: (req, context) => {
          const n = slot.free.pop() ?? slot.next++;
          const stay = stayOf(f, n);
          const key = `${stay.propertyId}|${stay.checkIn}`;
          inFlight.add(key);
          Object.assign(context, { n, key, at: performance.now() });
          return {
            ...req,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${f.guests[n % f.guests.length]!}` },
            body: JSON.stringify({ ...stay, guests: 2 }),
          };
        },
        onResponse: (status, body, context, headers) => {
          const { n, key, at } = context as { n: number; key: string; at: number };
          inFlight.delete(key);
          told.set(key, status);
          count(statuses.bookings, status);
          if (status === 201) accepted.push({ id: (JSON.parse(body) as { id: string }).id, ms: performance.now() - at, key });
          else if (status === 503) {
            on503('bookings', body, headers);
            slot.free.push(n); // nothing was booked: the stay is asked for again
          }
        },
      },
    ],
  });
  const searchRun = autocannon({
    url: `${f.baseUrl}/search?city=Porto&limit=10`,
    connections: searchConnections,
    ...amount(searchConnections),
    timeout: 30,
    requests: [
      {
        method: 'GET',
        setupRequest: (req, context) => {
          Object.assign(context, { at: performance.now() });
          return req;
        },
        onResponse: (status, body, context, headers) => {
          count(statuses.search, status);
          if (status === 200) searchOkMs.push(performance.now() - (context as { at: number }).at);
          else if (status === 503) on503('search', body, headers);
        },
      },
    ],
  });
  const stopTrace = traceSignals(f.baseUrl);
  const [b, s] = await Promise.all([bookingRun, searchRun]);
  const elapsed = (performance.now() - t0) / 1000;
  const signals = await stopTrace();
  const shed: Record<string, number> = {};
  const metrics = await (await fetch(`${f.baseUrl}/metrics`)).text();
  for (const m of metrics.matchAll(/^stayhub_http_shed_requests_total\{class="(\w+)",signal="(\w+)"\} (\d+)/gm)) {
    if (Number(m[3]) > 0) shed[`${m[1]}/${m[2]}`] = Number(m[3]);
  }

  // What the database kept, against what the clients were told.
  const rows = await keptSince(f.url, since);
  const acceptedIds = new Set(accepted.map((a) => a.id));
  const rowIds = new Set(rows.map((r) => r.id));
  const emailsOf = new Map(rows.map((r) => [r.id, r.emails]));
  let lost = 0;
  let doubled = statuses.bookings['409'] ?? 0;
  for (const a of accepted) {
    const emails = emailsOf.get(a.id) ?? 0;
    if (!rowIds.has(a.id) || emails === 0) lost++;
    else if (emails > 1) doubled++;
  }
  let unanswered = 0;
  for (const r of rows) {
    if (acceptedIds.has(r.id)) continue;
    const key = `${r.property}|${r.check_in}`;
    if (inFlight.has(key) || !told.has(key)) unanswered++;
    else doubled++;
  }

  const n503 = (m: Record<string, number>) => m['503'] ?? 0;
  const total = (m: Record<string, number>) => Object.values(m).reduce((x, y) => x + y, 0);
  const fiveXx = (m: Record<string, number>) =>
    Object.entries(m)
      .filter(([k]) => Number(k) >= 500 && k !== '503')
      .reduce((x, [, v]) => x + v, 0);
  const bookingRequests = total(statuses.bookings);
  const searchRequests = total(statuses.search);
  const acceptedMs = accepted.map((a) => a.ms);
  const expectedStatus = (m: Record<string, number>, ok: string) =>
    total(m) - (m[ok] ?? 0) - n503(m) - fiveXx(m) - (ok === '201' ? (m['409'] ?? 0) : 0);
  searchOkMs = searchOkMs.length ? searchOkMs : [Number.NaN];
  return {
    bookingRequests,
    accepted: accepted.length,
    acceptedPerSecond: round(accepted.length / elapsed, 1),
    acceptedP50: round(percentile(acceptedMs, 50), 1),
    acceptedP99: round(percentile(acceptedMs, 99), 1),
    bookingShare503: round(bookingRequests ? (100 * n503(statuses.bookings)) / bookingRequests : 0, 1),
    searchRequests,
    searchOk: statuses.search['200'] ?? 0,
    searchOkP99: round(percentile(searchOkMs, 99), 1),
    searchShare503: round(searchRequests ? (100 * n503(statuses.search)) / searchRequests : 0, 1),
    share503: round(
      bookingRequests + searchRequests ? (100 * (n503(statuses.bookings) + n503(statuses.search))) / (bookingRequests + searchRequests) : 0,
      1,
    ),
    other5xx: fiveXx(statuses.bookings) + fiveXx(statuses.search),
    noRetryAfter,
    not503Overloaded: Object.entries(codes503)
      .filter(([code]) => code !== 'overloaded')
      .reduce((x, [, v]) => x + v, 0),
    otherStatus: expectedStatus(statuses.bookings, '201') + expectedStatus(statuses.search, '200'),
    errors: b.errors + b.timeouts + s.errors + s.timeouts,
    lost,
    doubled,
    unanswered,
    firstBooking503: round(first503.bookings, 0),
    firstSearch503: round(first503.search, 0),
    ...signals,
    detail: { codes503, shed, statuses },
  };
}

const line = (label: string, r: OverloadRun) =>
  `${label}: ${r.accepted} booked (${r.acceptedPerSecond}/s, p50 ${r.acceptedP50} ms, p99 ${r.acceptedP99} ms), 503 ${r.share503} % (bookings ${r.bookingShare503} %, search ${r.searchShare503} %), other 5xx ${r.other5xx}, lost ${r.lost}, doubled ${r.doubled}, unanswered ${r.unanswered}, no answer ${r.errors}; event-loop delay p50 ${r.eventLoopDelayP50} ms (max ${r.eventLoopDelayMax}), pool wait p50 ${r.poolWaitP50} ms (max ${r.poolWaitMax})`;

export interface OverloadResults {
  seconds: number;
  runs: number;
  byConnections: { connections: number; shedding: Repeated<OverloadRun>; without: Repeated<OverloadRun> }[];
  /** Summed over every run of both APIs: must all be 0. */
  other5xx: number;
  lost: number;
  doubled: number;
  /** 503s of the shedding API without Retry-After, or whose code is not `overloaded`. */
  bad503: number;
}

/**
 * The bench section: both APIs on databases of their own (`freshDb`), every connection count,
 * `runs` times each, shedding and not alternating which goes first.
 */
export async function overloadSection(opts: {
  smoke: boolean;
  freshDb: (name: string) => Promise<string>;
  logDir: string;
  log: (msg: string) => void;
}): Promise<OverloadResults> {
  const P = opts.smoke ? OVERLOAD_SMOKE : OVERLOAD_FULL;
  const sizes = { guests: P.guests, properties: P.properties };
  const start = async (name: string, shedding: boolean) => {
    const dir = path.join(opts.logDir, name);
    mkdirSync(dir, { recursive: true });
    return startApi(await opts.freshDb(name), sizes, dir, undefined, { LOAD_SHEDDING: String(shedding) });
  };
  const on = await start('overload_shedding', true);
  try {
    const off = await start('overload_without', false);
    try {
      const runs = new Map<number, { shedding: OverloadRun[]; without: OverloadRun[] }>();
      let other5xx = 0;
      let lost = 0;
      let doubled = 0;
      let bad503 = 0;
      for (let r = 0; r < P.runs; r++) {
        for (const connections of P.connections) {
          const order = r % 2 === 0 ? (['shedding', 'without'] as const) : (['without', 'shedding'] as const);
          for (const which of order) {
            const { detail, ...run } = await overloadLoad(which === 'shedding' ? on : off, { ...P, connections });
            const into = runs.get(connections) ?? { shedding: [], without: [] };
            runs.set(connections, into);
            into[which].push(run);
            other5xx += run.other5xx;
            lost += run.lost;
            doubled += run.doubled;
            if (which === 'shedding') bad503 += run.noRetryAfter + run.not503Overloaded;
            opts.log(
              `   ${connections} clients, ${which === 'shedding' ? 'shedding' : 'no shedding'}: ${line('', run).slice(2)}; 503 codes ${JSON.stringify(detail.codes503)}`,
            );
          }
        }
      }
      return {
        seconds: P.seconds,
        runs: P.runs,
        byConnections: P.connections.map((c) => ({
          connections: c,
          shedding: repeatOf(runs.get(c)!.shedding),
          without: repeatOf(runs.get(c)!.without),
        })),
        other5xx,
        lost,
        doubled,
        bad503,
      };
    } finally {
      await off.close();
    }
  } finally {
    await on.close();
  }
}

/** The section of bench-results.md. */
export function renderOverload(o: OverloadResults): string[] {
  const L = [
    `## Overload: half the clients booking, half searching (${o.seconds} s a run, medians of ${o.runs})`,
    '',
    '| Clients | Load shedding | Booked /s | Accepted p50 (ms) | Accepted p99 (ms) | 503 share (bookings / search) | Search 200 p99 (ms) | Other 5xx | Lost | Doubled | Event-loop delay p50 (ms) | Pool wait p50 (ms) |',
    '|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|',
  ];
  for (const c of o.byConnections) {
    for (const [label, rep] of [
      ['on', c.shedding],
      ['off', c.without],
    ] as const) {
      const m = rep.median;
      L.push(
        `| ${c.connections} | ${label} | ${m.acceptedPerSecond} | ${m.acceptedP50} | ${m.acceptedP99} | ${m.share503} % (${m.bookingShare503} / ${m.searchShare503}) | ${m.searchOkP99} | ${m.other5xx} | ${m.lost} | ${m.doubled} | ${m.eventLoopDelayP50} | ${m.poolWaitP50} |`,
      );
    }
  }
  L.push(
    '',
    `Over every run: other 5xx ${o.other5xx}, bookings lost ${o.lost}, doubled ${o.doubled}; 503s of the shedding API without Retry-After or not \`overloaded\`: ${o.bad503}.`,
    '',
  );
  return L;
}
