import { spawnSync, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import autocannon, { type AutocannonResult } from 'autocannon';
import type { Pooler } from '../../src/db/pooler.ts';
import { startPgBouncer } from '../../test/helpers/pgbouncer.ts';
import { withClient } from '../lib/postgres.ts';
import { freePort, startNodeProcess } from '../lib/processes.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { round } from './lib/stats.ts';

/**
 * The booking write path. The API runs as its own process (`node --import tsx src/commands/api.ts`,
 * exactly what `npm run api` starts) so autocannon, in this process, never shares its event loop.
 * Users and properties are created through the HTTP API; every POST /bookings asks for a stay no
 * one else asked for, so every answer should be a 201.
 */

export const STAY_NIGHTS = 2;

export interface ApiFixture {
  url: string;
  baseUrl: string;
  api: ChildProcess;
  guests: string[]; // bearer tokens
  apiProperties: string[]; // public ids, for autocannon
  conflictProperty: string;
  /** Internal ids (contiguous) of the properties and guests pgbench books. */
  pgbench: { pmin: number; nprops: number; gmin: number; nguests: number };
  close(): Promise<void>;
}

/** The API's JSON answer, taken to be a `T` (the bench's own API: not checked). */
async function http<T>(baseUrl: string, method: string, url: string, body?: unknown, token?: string): Promise<T> {
  const res = await fetch(baseUrl + url, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json: unknown = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(`${method} ${url} → ${res.status} ${JSON.stringify(json)}`);
  return json as T;
}

async function register(baseUrl: string, role: 'guest' | 'host', i: number) {
  const body = { email: `bench-${role}-${i}@example.test`, password: 'correct horse battery', name: `Bench ${role} ${i}`, role };
  return http<{ token: string; user: { id: string } }>(baseUrl, 'POST', '/auth/register', body);
}

const property = (i: number) => ({
  title: `Bench flat ${i}`,
  city: 'Porto',
  country: 'PT',
  nightlyPrice: 10_000,
  cleaningFee: 2_500,
  maxGuests: 4,
});

/**
 * `make(0)` … `make(n - 1)`, a few at a time, their results in that order. A fixture's users and
 * properties, one after the other, were most of its start (a sign-up hashes a password); a few at
 * a time stay below the API's pool, so a shedding API refuses none of them. Each set is made on
 * its own, nothing else inserted meanwhile, so its ids stay contiguous for pgbench.
 */
async function fewAtATime<T>(n: number, make: (i: number) => Promise<T>): Promise<T[]> {
  const made: T[] = new Array<T>(n);
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < n; i = next++) made[i] = await make(i);
  };
  await Promise.all(Array.from({ length: Math.min(4, n) }, lane));
  return made;
}

const contiguousIds = (url: string, table: 'properties' | 'users', publicIds: string[]) =>
  withClient(url, async (c) => {
    const { rows } = await c.query<{ min: string; max: string; n: number }>(
      `select min(id) as min, max(id) as max, count(*)::int as n from ${table} where public_id = any($1::uuid[])`,
      [publicIds],
    );
    const r = rows[0]!;
    if (Number(r.max) - Number(r.min) + 1 !== r.n) throw new Error(`${table} ids for pgbench are not contiguous`);
    return { min: Number(r.min), n: r.n };
  });

/**
 * Starts the API on the database at `url` and fills it. With `through`, the API connects through a
 * pooler instead (its address of the same database, and DATABASE_POOLER); the bench's own
 * connections (fixture, pgbench, checks) still go to `url`.
 */
export async function startApi(
  url: string,
  sizes: { guests: number; properties: number },
  logDir: string,
  through?: { url: string; pooler: Pooler },
  /** More of the API's environment (tracing.ts: the OTEL_* variables; overload.ts: LOAD_SHEDDING). */
  env: Record<string, string> = {},
): Promise<ApiFixture> {
  const port = await freePort();
  const logFile = path.join(logDir, through ? `api-${through.pooler}-pooler.log` : 'api.log');
  const api = startNodeProcess({
    entry: 'src/commands/api.ts',
    env: {
      ...process.env,
      DATABASE_URL: through?.url ?? url,
      DATABASE_POOLER: through?.pooler ?? 'none',
      PORT: String(port),
      HOST: '127.0.0.1',
      // Request logs off: this measures the write path, not pino writing two lines a request.
      LOG_LEVEL: 'warn',
      // Registration is rate-limited per address; the bench signs up its users from one.
      RATE_LIMIT_AUTH_PER_MINUTE: '100000',
      SIGNUPS_PER_ADDRESS_PER_DAY: '1000000',
      // The write path's capacity is measured, not admission: on a busy machine load shedding
      // would turn bookings into 503s. The overload section measures it (overload.ts).
      LOAD_SHEDDING: 'false',
      ...env,
    },
    logFile,
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (api.child.exitCode !== null) throw new Error(`the API exited (${api.child.exitCode}); see ${logFile}`);
    try {
      if ((await fetch(`${baseUrl}/health`)).ok) break;
    } catch {
      /* not listening yet */
    }
    if (i > 300) throw new Error('the API did not answer /health within 30 s');
    await sleep(100);
  }

  const hostToken = (await register(baseUrl, 'host', 0)).token;
  const signedUp = await fewAtATime(sizes.guests, (i) => register(baseUrl, 'guest', i));
  const guests = signedUp.map((s) => s.token);
  const guestIds = signedUp.map((s) => s.user.id);
  const create = async (i: number) => (await http<{ id: string }>(baseUrl, 'POST', '/properties', property(i), hostToken)).id;
  const apiProperties = await fewAtATime(sizes.properties, (i) => create(i));
  const pgbenchProperties = await fewAtATime(sizes.properties, (i) => create(10_000 + i));
  const conflictProperty = await create(99_999);

  const p = await contiguousIds(url, 'properties', pgbenchProperties);
  const g = await contiguousIds(url, 'users', guestIds);
  return {
    url,
    baseUrl,
    api: api.child,
    guests,
    apiProperties,
    conflictProperty,
    pgbench: { pmin: p.min, nprops: p.n, gmin: g.min, nguests: g.n },
    close: () => api.stop(),
  };
}

/** Server connections PgBouncer keeps per database for the pooled API: DB_POOL_MAX's default, as the direct API has. */
export const POOLED_SERVER_CONNECTIONS = 10;

/**
 * The API as managed PostgreSQL serves it by default: through PgBouncer (Debian's, 1.18) in
 * transaction mode, DATABASE_POOLER=transaction, on the database at `url`. Undefined when
 * pgbouncer is not installed. Closing the fixture stops PgBouncer too.
 */
export async function startPooledApi(
  url: string,
  sizes: { guests: number; properties: number },
  logDir: string,
): Promise<ApiFixture | undefined> {
  if (spawnSync('pgbouncer', ['--version']).status !== 0) return undefined;
  const bouncer = await startPgBouncer(url, { pool_mode: 'transaction', default_pool_size: POOLED_SERVER_CONNECTIONS });
  try {
    const fixture = await startApi(url, sizes, logDir, { url: bouncer.url(url), pooler: 'transaction' });
    return {
      ...fixture,
      close: async () => {
        await fixture.close();
        await bouncer.stop();
      },
    };
  } catch (e) {
    await bouncer.stop();
    throw e;
  }
}

/** 'YYYY-MM-DD', `days` from today (UTC): the service's calendar. */
export function day(days: number): string {
  const d = new Date();
  d.setUTCDate(d.getUTCDate() + days);
  return d.toISOString().slice(0, 10);
}

/**
 * Stay number n: property n mod P, check-in 1 + 2·⌊n/P⌋ days ahead, two nights. Distinct n never
 * overlap, so no request of a run can conflict with any other, in this run or an earlier one.
 */
let nextApiSlot = 0;

/** Set by the smoke run: requests per run as a function of the connections, instead of seconds. */
let httpAmount: ((connections: number) => number) | undefined;
export function useFixedRequestCounts(perConnection: number | undefined): void {
  httpAmount = perConnection ? (c) => c * perConnection : undefined;
}

function summarise(r: AutocannonResult) {
  return {
    rps: round(r.requests.average, 1),
    p50: round(r.latency.p50, 3),
    p99: round(r.latency.p99, 3),
    requests: r.requests.total,
    errors: r.errors + r.timeouts,
    codes: Object.fromEntries(Object.entries(r.statusCodeStats).map(([k, v]) => [k, v.count])),
  };
}

/**
 * autocannon POSTing bookings for `seconds` over `connections`; `next()` names each request's
 * guest token and stay (called once per request, in order).
 */
function postBookings(
  f: ApiFixture,
  connections: number,
  seconds: number,
  next: () => { token: string; propertyId: string; checkIn: number },
) {
  return autocannon({
    url: `${f.baseUrl}/bookings`,
    connections,
    // A fixed number of requests instead of a duration (the smoke run): done however loaded the machine.
    ...(httpAmount ? { amount: httpAmount(connections) } : { duration: seconds }),
    timeout: 30,
    requests: [
      {
        method: 'POST',
        setupRequest: (req) => {
          const { token, propertyId, checkIn } = next();
          return {
            ...req,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
            body: JSON.stringify({ propertyId, checkIn: day(checkIn), checkOut: day(checkIn + STAY_NIGHTS), guests: 2 }),
          };
        },
      },
    ],
  });
}

/** POST /bookings, every request a stay no one asked for: req/s, latency (ms) and the answers other than 201. */
export async function apiBookings(f: ApiFixture, connections: number, seconds: number) {
  const P = f.apiProperties.length;
  const result = await postBookings(f, connections, seconds, () => {
    const n = nextApiSlot++;
    return { token: f.guests[n % f.guests.length]!, propertyId: f.apiProperties[n % P]!, checkIn: 1 + STAY_NIGHTS * Math.floor(n / P) };
  });
  const s = summarise(result);
  const non201 = s.requests - (s.codes['201'] ?? 0);
  if (non201 > 0) console.warn(`  ! ${non201} POST /bookings answers were not 201: ${JSON.stringify(s.codes)}`);
  return { rps: s.rps, p50: s.p50, p99: s.p99, requests: s.requests, non201, errors: s.errors };
}

/** Rounds used by earlier conflict runs: a later run never asks for dates an earlier one booked. */
let conflictRoundsUsed = 0;

/**
 * 32 connections all asking for the same stay of one property: request i books round ⌊i/32⌋'s
 * dates, so each round of 32 has one winner (201) and 31 losers that must get a clean 409.
 */
export async function apiConflicts(f: ApiFixture, connections: number, seconds: number) {
  let i = 0;
  let rounds = 0;
  // Far from every non-conflicting stay, and after the last round of every earlier run.
  const base = 10_000 + STAY_NIGHTS * conflictRoundsUsed;
  const result = await postBookings(f, connections, seconds, () => {
    const round = Math.floor(i / connections);
    rounds = Math.max(rounds, round + 1);
    return { token: f.guests[i++ % f.guests.length]!, propertyId: f.conflictProperty, checkIn: base + STAY_NIGHTS * round };
  });
  conflictRoundsUsed += rounds + 1;
  const s = summarise(result);
  const c201 = s.codes['201'] ?? 0;
  const c409 = s.codes['409'] ?? 0;
  const c5xx = result['5xx'];
  // What the database kept of this run: at most one booking per round's dates, and exactly one
  // for every 201 (a winner the client was told about). Holds under any load, unlike "one 201 per
  // round": on a busy machine a round can end with every request refused or timed out.
  const kept = await withClient(f.url, async (c) => {
    const { rows } = await c.query<{ winners: number; max_per_round: number }>(
      `select count(*)::int as winners, coalesce(max(n), 0)::int as max_per_round
         from (select check_in, count(*)::int as n from bookings b join properties p on p.id = b.property_id
                where p.public_id = $1 and b.status = 'confirmed'
                  and b.check_in between current_date + $2::int and current_date + $3::int
                group by check_in) r`,
      [f.conflictProperty, base, base + STAY_NIGHTS * rounds],
    );
    return { winners: rows[0]!.winners, maxPerRound: rows[0]!.max_per_round };
  });
  return {
    rps: s.rps,
    p99: s.p99,
    requests: s.requests,
    rounds,
    created201: c201,
    conflict409: c409,
    server5xx: c5xx,
    other: s.requests - c201 - c409 - c5xx,
    share409: round(s.requests ? (100 * c409) / s.requests : Number.NaN, 2),
    bookingsKept: kept.winners,
    maxWinnersPerRound: kept.maxPerRound,
    errors: s.errors,
  };
}
