import autocannon from 'autocannon';
import { day, type ApiFixture } from './api.ts';
import type { Repeated } from './lib/stats.ts';
import { dbNow, keptSince, shedCounts, traceSignals } from './overload-observed.ts';
import { Answers, runFigures, type OverloadDetail, type OverloadRun } from './overload-tally.ts';

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
  'two APIs (node --import tsx src/commands/api.ts, LOG_LEVEL=warn, defaults) started together on databases of their own, LOAD_SHEDDING=true and false; two autocannon instances in the bench process, half the connections POSTing /bookings (every stay new; a stay refused with 503 asked for again) and half GETting /search?city=Porto&limit=10; runs alternating between the APIs; accepted latency from the request built to its 201';

// A run's figures and what its 503s said: their shape is the tally's (overload-tally.ts).
export type { OverloadDetail, OverloadRun } from './overload-tally.ts';

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
export async function overloadLoad(
  f: ApiFixture,
  opts: { connections: number; seconds: number; requestsPerConnection?: number },
): Promise<OverloadRun & { detail: OverloadDetail }> {
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
