import { mkdirSync } from 'node:fs';
import path from 'node:path';
import autocannon, { type AutocannonResult } from 'autocannon';
import { day, startApi, type ApiFixture } from './api.ts';
import { percentile, repeatEach, round } from './lib/stats.ts';
import { dbNow, keptSince, shedCounts, traceSignals } from './overload-observed.ts';
import type { BenchContext, PartOf } from './context.ts';

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

const OVERLOAD_FULL = { connections: [50, 300, 1000], seconds: 10, runs: 3, properties: 300, guests: 32 };
/** Smoke: a fixed number of requests per connection instead of `seconds`. */
const OVERLOAD_SMOKE: typeof OVERLOAD_FULL & { requestsPerConnection?: number } = {
  connections: [8, 32],
  seconds: 1,
  runs: 1,
  properties: 10,
  guests: 4,
  requestsPerConnection: 3,
};

/** How the section runs, for the results' setup list. */
const OVERLOAD_SETUP =
  'two APIs (node --import tsx src/commands/api.ts, LOG_LEVEL=warn, defaults) started together on databases of their own, LOAD_SHEDDING=true and false; two autocannon instances in the bench process, half the connections POSTing /bookings (every stay new; a stay refused with 503 asked for again) and half GETting /search?city=Porto&limit=10; runs alternating between the APIs; accepted latency from the request built to its 201';

/** One run's figures (a type, not an interface: repeatOf needs a Record<string, number>), and what its 503s said. */
type OverloadRun = Omit<ReturnType<typeof runFigures>, 'detail'>;

interface Stay {
  propertyId: string;
  checkIn: string;
  checkOut: string;
}

/** Per fixture: the next stay never asked for, and stays refused with 503 to be asked for again. */
const slots = new WeakMap<ApiFixture, { next: number; free: number[] }>();

function stayOf(f: ApiFixture, n: number): Stay {
  const P = f.apiProperties.length;
  // Two nights, far from the api section's stays (days 1…) in case both ever share a fixture.
  const from = 20_000 + 2 * Math.floor(n / P);
  return { propertyId: f.apiProperties[n % P]!, checkIn: day(from), checkOut: day(from + 2) };
}

/**
 * `connections` clients for `seconds` (or a fixed number of requests each), half on POST /bookings
 * and half on GET /search, against the API of `f`. Returns the run's figures and what the 503s said.
 */
export async function overloadLoad(f: ApiFixture, opts: { connections: number; seconds: number; requestsPerConnection?: number }) {
  const bookingConnections = Math.ceil(opts.connections / 2);
  const searchConnections = Math.max(1, opts.connections - bookingConnections);
  const since = await dbNow(f.url);
  const t0 = performance.now();
  const answers = new Answers(t0);
  const amount = (c: number) => (opts.requestsPerConnection ? { amount: c * opts.requestsPerConnection } : { duration: opts.seconds });
  const bookingRun = bookingClients(f, answers, { connections: bookingConnections, ...amount(bookingConnections) });
  const searchRun = searchClients(f, answers, { connections: searchConnections, ...amount(searchConnections) });
  const stopTrace = traceSignals(f.baseUrl);
  const clients = await Promise.all([bookingRun, searchRun]);
  const elapsed = (performance.now() - t0) / 1000;
  const signals = await stopTrace();
  const shed = await shedCounts(f.baseUrl);
  // What the database kept, against what the clients were told.
  const rows = await keptSince(f.url, since);
  return runFigures(answers, { elapsed, clients, rows, shed }, signals);
}

type Amount = { connections: number; amount?: number; duration?: number };

/** POST /bookings, every request a stay no other asked for; a stay refused with 503 is asked for again. */
function bookingClients(f: ApiFixture, answers: Answers, amount: Amount) {
  const slot = slots.get(f) ?? { next: 0, free: [] };
  slots.set(f, slot);
  return autocannon({
    url: `${f.baseUrl}/bookings`,
    ...amount,
    timeout: 30,
    requests: [
      {
        method: 'POST',
        setupRequest: (req, context) => {
          const n = slot.free.pop() ?? slot.next++;
          const stay = stayOf(f, n);
          const key = `${stay.propertyId}|${stay.checkIn}`;
          answers.inFlight.add(key);
          Object.assign(context, { n, key, at: performance.now() });
          return {
            ...req,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${f.guests[n % f.guests.length]!}` },
            body: JSON.stringify({ ...stay, guests: 2 }),
          };
        },
        onResponse: (status, body, context, headers) => {
          const { n, key, at } = context as { n: number; key: string; at: number };
          answers.inFlight.delete(key);
          answers.told.set(key, status);
          answers.status('bookings', status);
          if (status === 201) answers.accepted.push({ id: (JSON.parse(body) as { id: string }).id, ms: performance.now() - at, key });
          else if (status === 503) {
            answers.on503('bookings', body, headers);
            slot.free.push(n); // nothing was booked: the stay is asked for again
          }
        },
      },
    ],
  });
}

/** GET /search?city=Porto&limit=10, the latency of each 200 kept. */
function searchClients(f: ApiFixture, answers: Answers, amount: Amount) {
  return autocannon({
    url: `${f.baseUrl}/search?city=Porto&limit=10`,
    ...amount,
    timeout: 30,
    requests: [
      {
        method: 'GET',
        setupRequest: (req, context) => {
          Object.assign(context, { at: performance.now() });
          return req;
        },
        onResponse: (status, body, context, headers) => {
          answers.status('search', status);
          if (status === 200) answers.searchOkMs.push(performance.now() - (context as { at: number }).at);
          else if (status === 503) answers.on503('search', body, headers);
        },
      },
    ],
  });
}

/** Half the clients booking, half searching, with and without load shedding. */
export const overloadSection = {
  name: 'overload',
  markdown: [{ place: 13, render: renderOverload }],
  async run(ctx: BenchContext) {
    ctx.results.setup.overload = OVERLOAD_SETUP;
    return { overload: await measureOverload(ctx) };
  },
};

const line = (label: string, r: OverloadRun) =>
  `${label}: ${r.accepted} booked (${r.acceptedPerSecond}/s, p50 ${r.acceptedP50} ms, p99 ${r.acceptedP99} ms), 503 ${r.share503} % (bookings ${r.bookingShare503} %, search ${r.searchShare503} %), other 5xx ${r.other5xx}, lost ${r.lost}, doubled ${r.doubled}, unanswered ${r.unanswered}, no answer ${r.errors}; event-loop delay p50 ${r.eventLoopDelayP50} ms (max ${r.eventLoopDelayMax}), pool wait p50 ${r.poolWaitP50} ms (max ${r.poolWaitMax})`;

/**
 * Both APIs on databases of their own, every connection count, `runs` times each, shedding and
 * not alternating which goes first.
 */
async function measureOverload({ smoke, server, log }: BenchContext) {
  const P = smoke ? OVERLOAD_SMOKE : OVERLOAD_FULL;
  const sizes = { guests: P.guests, properties: P.properties };
  const start = async (name: string, shedding: boolean) => {
    const dir = path.join(server.dir, name);
    mkdirSync(dir, { recursive: true });
    return startApi(await server.createDatabase(name, server.ourTemplate), sizes, dir, undefined, { LOAD_SHEDDING: String(shedding) });
  };
  const on = await start('overload_shedding', true);
  try {
    const off = await start('overload_without', false);
    try {
      const runs = new Map(P.connections.map((c) => [c, { shedding: [] as OverloadRun[], without: [] as OverloadRun[] }]));
      for (let r = 0; r < P.runs; r++) {
        for (const connections of P.connections) {
          for (const which of r % 2 === 0 ? (['shedding', 'without'] as const) : (['without', 'shedding'] as const)) {
            const { detail, ...run } = await overloadLoad(which === 'shedding' ? on : off, { ...P, connections });
            runs.get(connections)![which].push(run);
            log(
              `   ${connections} clients, ${which === 'shedding' ? 'shedding' : 'no shedding'}: ${line('', run).slice(2)}; 503 codes ${JSON.stringify(detail.codes503)}`,
            );
          }
        }
      }
      const byConnections = P.connections.map((c) => ({ connections: c, ...repeatEach(runs.get(c)!) }));
      const all = { shedding: [...runs.values()].flatMap((x) => x.shedding), without: [...runs.values()].flatMap((x) => x.without) };
      const sum = (runs: OverloadRun[], k: (r: OverloadRun) => number) => runs.reduce((a, r) => a + k(r), 0);
      const both = [...all.shedding, ...all.without];
      return {
        seconds: P.seconds,
        runs: P.runs,
        byConnections,
        // Summed over every run of both APIs: must all be 0; bad503: the shedding API's 503s without
        // Retry-After, or whose code is not `overloaded`.
        other5xx: sum(both, (r) => r.other5xx),
        lost: sum(both, (r) => r.lost),
        doubled: sum(both, (r) => r.doubled),
        bad503: sum(all.shedding, (r) => r.noRetryAfter + r.not503Overloaded),
      };
    } finally {
      await off.close();
    }
  } finally {
    await on.close();
  }
}

/** The section of bench-results.md. */
function renderOverload(r: PartOf<typeof overloadSection>): string[] {
  const o = r.overload;
  if (!o) return [];
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
        `| ${c.connections} | ${label} | ${m.acceptedPerSecond} | ${m.acceptedP50} | ${m.acceptedP99} | ${m.share503} % (${m.bookingShare503} / ${m.searchShare503}) | ${Number.isFinite(m.searchOkP99) ? m.searchOkP99 : 'none'} | ${m.other5xx} | ${m.lost} | ${m.doubled} | ${m.eventLoopDelayP50} | ${m.poolWaitP50} |`,
      );
    }
  }
  L.push(
    '',
    `Search 200 p99 "none": every search of those runs was refused. Over every run: other 5xx ${o.other5xx}, bookings lost ${o.lost}, doubled ${o.doubled}; 503s of the shedding API without Retry-After or not \`overloaded\`: ${o.bad503}.`,
    '',
  );
  return L;
}

type Route = 'bookings' | 'search';
const count = (m: Record<string, number>, k: string | number) => (m[k] = (m[k] ?? 0) + 1);

class Answers {
  readonly accepted: { id: string; ms: number; key: string }[] = [];
  /** The answer each stay got last (its key: property|check-in); absent while in flight. */
  readonly told = new Map<string, number>();
  readonly inFlight = new Set<string>();
  readonly codes503: Record<string, number> = {};
  readonly statuses = { bookings: {} as Record<string, number>, search: {} as Record<string, number> };
  noRetryAfter = 0;
  first503 = { bookings: -1, search: -1 };
  searchOkMs: number[] = [];

  constructor(private readonly t0: number) {}

  status(route: Route, status: number): void {
    count(this.statuses[route], status);
  }

  /** A 503: when the route's first came, whether it said Retry-After, and its problem code. */
  on503(route: Route, body: string, headers: Record<string, string | string[]>): void {
    if (this.first503[route] < 0) this.first503 = { ...this.first503, [route]: performance.now() - this.t0 };
    if (headers['retry-after'] === undefined) this.noRetryAfter++;
    let code = 'unparsable';
    try {
      code = String((JSON.parse(body) as { code?: unknown }).code);
    } catch {
      /* counted as unparsable */
    }
    count(this.codes503, code);
  }
}

/** Lost, doubled and unanswered bookings: what the database kept against what the clients were told. */
function keptAgainstTold(a: Answers, rows: Awaited<ReturnType<typeof keptSince>>) {
  const acceptedIds = new Set(a.accepted.map((x) => x.id));
  const rowIds = new Set(rows.map((r) => r.id));
  const emailsOf = new Map(rows.map((r) => [r.id, r.emails]));
  let lost = 0;
  let doubled = a.statuses.bookings['409'] ?? 0;
  for (const x of a.accepted) {
    const emails = emailsOf.get(x.id) ?? 0;
    if (!rowIds.has(x.id) || emails === 0) lost++;
    else if (emails > 1) doubled++;
  }
  let unanswered = 0;
  for (const r of rows) {
    if (acceptedIds.has(r.id)) continue;
    const key = `${r.property}|${r.check_in}`;
    if (a.inFlight.has(key) || !a.told.has(key)) unanswered++;
    else doubled++;
  }
  return { lost, doubled, unanswered };
}

const n503 = (m: Record<string, number>) => m['503'] ?? 0;
const total = (m: Record<string, number>) => Object.values(m).reduce((x, y) => x + y, 0);
const fiveXx = (m: Record<string, number>) =>
  Object.entries(m)
    .filter(([k]) => Number(k) >= 500 && k !== '503')
    .reduce((x, [, v]) => x + v, 0);
const share = (part: number, all: number) => round(all ? (100 * part) / all : 0, 1);

/**
 * The run's figures from its answers, the clients' errors, the database's rows and the API's
 * signals (all numbers, so runs can be summarised by repeatOf; latencies in ms), and what the 503s
 * said, for a test to quote.
 */
function runFigures(
  a: Answers,
  run: { elapsed: number; clients: AutocannonResult[]; rows: Awaited<ReturnType<typeof keptSince>>; shed: Record<string, number> },
  signals: Awaited<ReturnType<ReturnType<typeof traceSignals>>>,
) {
  const { statuses } = a;
  const bookingRequests = total(statuses.bookings);
  const searchRequests = total(statuses.search);
  const acceptedMs = a.accepted.map((x) => x.ms);
  const expectedStatus = (m: Record<string, number>, ok: string) =>
    total(m) - (m[ok] ?? 0) - n503(m) - fiveXx(m) - (ok === '201' ? (m['409'] ?? 0) : 0);
  const searchOkMs = a.searchOkMs.length ? a.searchOkMs : [Number.NaN];
  return {
    bookingRequests,
    accepted: a.accepted.length,
    acceptedPerSecond: round(a.accepted.length / run.elapsed, 1),
    acceptedP50: round(percentile(acceptedMs, 50), 1),
    acceptedP99: round(percentile(acceptedMs, 99), 1),
    bookingShare503: share(n503(statuses.bookings), bookingRequests),
    searchRequests,
    searchOk: statuses.search['200'] ?? 0,
    searchOkP99: round(percentile(searchOkMs, 99), 1),
    searchShare503: share(n503(statuses.search), searchRequests),
    // All 503s over all answers, in %.
    share503: share(n503(statuses.bookings) + n503(statuses.search), bookingRequests + searchRequests),
    other5xx: fiveXx(statuses.bookings) + fiveXx(statuses.search),
    // 503s without Retry-After, and 503s whose problem code is not `overloaded`.
    noRetryAfter: a.noRetryAfter,
    not503Overloaded: Object.entries(a.codes503)
      .filter(([code]) => code !== 'overloaded')
      .reduce((x, [, v]) => x + v, 0),
    // Answers other than 201, 503 (bookings) and 200, 503 (search): none expected.
    otherStatus: expectedStatus(statuses.bookings, '201') + expectedStatus(statuses.search, '200'),
    // Requests that got no answer (client timeout, socket error).
    errors: run.clients.reduce((x, c) => x + c.errors + c.timeouts, 0),
    ...keptAgainstTold(a, run.rows),
    // ms from the start to the first 503 of each route (-1: none).
    firstBooking503: round(a.first503.bookings, 0),
    firstSearch503: round(a.first503.search, 0),
    // The API's own signals, scraped from /metrics every half second during the run (ms): median and largest.
    ...signals,
    // shed: the API's stayhub_http_shed_requests_total by "class/signal" after the run (cumulative over the API's life).
    detail: { codes503: a.codes503, shed: run.shed, statuses },
  };
}
