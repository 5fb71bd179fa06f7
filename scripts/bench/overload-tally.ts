import type { AutocannonResult } from 'autocannon';
import type { keptSince } from './overload-observed.ts';
import { percentile, round } from './lib/stats.ts';

/*
 * One overload run's answers as the clients saw them, and what they come to once set against what
 * the database kept (overload.ts says what lost, doubled and unanswered mean).
 */

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

type Route = 'bookings' | 'search';
const count = (m: Record<string, number>, k: string | number) => (m[k] = (m[k] ?? 0) + 1);

export class Answers {
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

/** The run's figures from its answers, the clients' errors, the database's rows and the API's signals. */
export function runFigures(
  a: Answers,
  run: { elapsed: number; clients: AutocannonResult[]; rows: Awaited<ReturnType<typeof keptSince>>; shed: Record<string, number> },
  signals: Pick<OverloadRun, 'eventLoopDelayP50' | 'eventLoopDelayMax' | 'poolWaitP50' | 'poolWaitMax'>,
): OverloadRun & { detail: OverloadDetail } {
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
    share503: share(n503(statuses.bookings) + n503(statuses.search), bookingRequests + searchRequests),
    other5xx: fiveXx(statuses.bookings) + fiveXx(statuses.search),
    noRetryAfter: a.noRetryAfter,
    not503Overloaded: Object.entries(a.codes503)
      .filter(([code]) => code !== 'overloaded')
      .reduce((x, [, v]) => x + v, 0),
    otherStatus: expectedStatus(statuses.bookings, '201') + expectedStatus(statuses.search, '200'),
    errors: run.clients.reduce((x, c) => x + c.errors + c.timeouts, 0),
    ...keptAgainstTold(a, run.rows),
    firstBooking503: round(a.first503.bookings, 0),
    firstSearch503: round(a.first503.search, 0),
    ...signals,
    detail: { codes503: a.codes503, shed: run.shed, statuses },
  };
}
