import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { apiBookings, startApi, type ApiFixture } from '../api.ts';
import { fillBookingHistory } from '../booking-history.ts';
import { mm, n, targetLines, x } from '../lib/markdown.ts';
import { measureEach, round, runsOf } from '../lib/stats.ts';
import { PREPARED_CONNECTIONS, type BenchContext, type PartOf } from '../context.ts';

type ApiLat = { rps: number; p50: number; p99: number };

/** POST /bookings on an empty bookings table and on one holding a long history of past stays. */
export const apiHistorySection = {
  name: 'api-history',
  markdown: [{ place: 12, render: apiHistoryMarkdown }],
  async run(ctx: BenchContext) {
    const { P, server, log } = ctx;
    const t = Date.now();
    const historyUrl = await server.createDatabase('api_history', server.ourTemplate);
    await fillBookingHistory(historyUrl, P.bookingHistory);
    log(`   ${P.bookingHistory.toLocaleString('en-US')} past bookings inserted in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const emptyUrl = await server.createDatabase('api_empty', server.ourTemplate);
    const sizes = { guests: P.apiGuests, properties: P.apiProperties };
    // Each API its own log file: startApi writes api.log in the folder it is given.
    const logDir = (name: string) => {
      const dir = path.join(server.dir, name);
      mkdirSync(dir, { recursive: true });
      return dir;
    };
    const empty = await startApi(emptyUrl, sizes, logDir('api-empty'));
    try {
      const history = await startApi(historyUrl, sizes, logDir('api-history'));
      try {
        return { apiHistory: await emptyAgainstHistory(ctx, empty, history) };
      } finally {
        await history.close();
      }
    } finally {
      await empty.close();
    }
  },
};

async function emptyAgainstHistory({ P, log }: BenchContext, empty: ApiFixture, history: ApiFixture) {
  const c = PREPARED_CONNECTIONS;
  // Warm-up: JIT, pool connections, plan caches.
  for (const f of [empty, history]) await apiBookings(f, c, Math.min(2, P.httpSeconds));
  let non201 = 0;
  const on = (f: ApiFixture) => async (): Promise<ApiLat> => {
    const a = await apiBookings(f, c, P.httpSeconds);
    non201 += a.non201;
    return { rps: a.rps, p50: a.p50, p99: a.p99 };
  };
  const configs = [
    { key: 'empty', label: 'empty bookings table', measure: on(empty) },
    { key: 'history', label: `${P.bookingHistory.toLocaleString('en-US')} past bookings`, measure: on(history) },
  ] as const;
  const show = (a: ApiLat) => `${a.rps} req/s, p50 ${a.p50} ms, p99 ${a.p99} ms`;
  const { empty: e, history: h } = runsOf(await measureEach(P.runs, configs, { log, show, rotate: true }));
  const result = {
    connections: c,
    bookings: P.bookingHistory,
    empty: e,
    history: h,
    p50Ratio: round(h.median.p50 / e.median.p50, 3),
    p99Ratio: round(h.median.p99 / e.median.p99, 3),
    non201,
  };
  log(`   with history / empty: p50 ${result.p50Ratio}×, p99 ${result.p99Ratio}×`);
  return result;
}

function apiHistoryMarkdown(r: PartOf<typeof apiHistorySection>): string[] {
  if (!r.apiHistory) return [];
  const ah = r.apiHistory;
  const L = [
    `## 12. The booking write path on a long bookings history (${ah.connections} connections, ${r.params.httpSeconds} s a run)`,
    '',
  ];
  L.push('| Bookings table | req/s | p50 (ms) | p99 (ms) |', '|---|---:|---:|---:|');
  L.push(`| empty | ${mm(ah.empty, 'rps')} | ${mm(ah.empty, 'p50', 1)} | ${mm(ah.empty, 'p99', 1)} |`);
  L.push(`| ${n(ah.bookings)} past bookings | ${mm(ah.history, 'rps')} | ${mm(ah.history, 'p50', 1)} | ${mm(ah.history, 'p99', 1)} |`);
  L.push('', `With history / empty: p50 ${x(ah.p50Ratio)}, p99 ${x(ah.p99Ratio)}. Answers other than 201: ${ah.non201}.`, '');
  targetLines(L, r.targets, 'Booking history');
  return L;
}
