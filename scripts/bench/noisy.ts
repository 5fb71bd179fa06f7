import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import pino from 'pino';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import { HandlerRegistry, type Handler } from '../../src/outbox/index.ts';
import { createConfiguredWorker } from '../../src/worker/outbox-worker.ts';
import { fillFlood, insertEvent, wakeUp } from './lib/outbox.ts';
import type { BenchContext, PartOf } from './context.ts';
import { mm } from './lib/markdown.ts';
import { measureEach, percentile, round, runsOf, type Repeated } from './lib/stats.ts';
import { bookingPayload } from '../lib/booking-payload.ts';

/*
 * Noisy neighbour: one host floods the outbox while other hosts book at a steady pace; what the
 * quiet hosts' booking emails wait (commit → handler entered, p50/p99), three ways in one run,
 * each on a fresh database with the same writes:
 *
 *   - quiet: the bookings alone;
 *   - fair: beside the flood, every message written as enqueue writes it (priority of its topic,
 *     its host as group, a turn from outbox_turn): the claim's order (ADR 0033);
 *   - fifo: beside the same flood, every message written without a priority, group or turn: the
 *     claim then takes them as it took every message before, oldest first (available_at, id).
 *
 * The worker: in-process (createConfiguredWorker, the defaults: claims of 20 growing to 1,000, 8 in flight,
 * LISTEN/NOTIFY), a handler per topic that waits HANDLER_MS (a search index write, an SMTP send).
 * The flood: FLOOD property.changed messages of one host, keyed per property, written at the start
 * as a bulk edit writes them, 1,000 a transaction (each row's turn as enqueue gives it one by one:
 * the group's previous + 1). The bookings: RATE booking.created a second, round robin over HOSTS
 * hosts, for SECONDS, each in its own transaction with its wake-up inside, clock from COMMIT sent.
 * Every booking is waited for (a FIFO booking behind the flood included) before the run ends.
 */

const NOISY_FULL = { flood: 50_000, hosts: 10, rate: 20, seconds: 10, handlerMs: 1 };
const NOISY_SMOKE: NoisyParams = { flood: 2_000, hosts: 3, rate: 10, seconds: 1, handlerMs: 1 };
type NoisyParams = typeof NOISY_FULL;
type NoisyMode = 'quiet' | 'fair' | 'fifo';
type NoisyRun = Awaited<ReturnType<typeof noisyNeighbour>>;

/** Quiet hosts' booking emails beside one host's flood: with priorities and turns, and FIFO. */
export const noisySection = {
  name: 'noisy',
  markdown: [{ place: 9.2, render: renderNoisy }],
  async run({ P, smoke, log, freshOurs }: BenchContext) {
    const np = smoke ? NOISY_SMOKE : NOISY_FULL;
    const configs = (['quiet', 'fair', 'fifo'] as const).map((m) => ({
      key: m,
      label: `noisy neighbour, ${m}`,
      measure: async () => noisyNeighbour(await freshOurs(), m, np),
    }));
    const runs = runsOf(
      await measureEach(Math.min(P.runs, 3), configs, {
        log,
        show: (r) => `booking email p50/p99 ${r.p50Ms}/${r.p99Ms} ms (${r.bookings} bookings), flood ${r.floodPerSecond}/s`,
      }),
    );
    // Medians: fair p99 / quiet p99, fifo p99 / quiet p99.
    const p99Over = (m: Repeated<NoisyRun>) => round(m.median.p99Ms / runs.quiet.median.p99Ms, 2);
    return { noisy: { params: np, ...runs, fairToQuietP99: p99Over(runs.fair), fifoToQuietP99: p99Over(runs.fifo) } };
  },
};

const BOOKING = JSON.stringify(bookingPayload({ idempotencyKey: 'bench' }));
const PROPERTY = JSON.stringify({ propertyId: randomUUID(), reason: 'updated' });

/** What the handlers saw: each booking's latency from its commit, the flood handled, a wake-up once all bookings are. */
interface Seen {
  started: Map<string, bigint>;
  latencies: number[];
  floodHandled: number;
  waiting?: () => void;
}

/** The booking email (timed from its commit) and the flood's handler, each taking `handlerMs`. */
function noisyHandlers(seen: Seen, p: NoisyParams): Handler<any>[] {
  return [
    {
      name: 'bench-booking-email',
      topic: 'booking.created',
      handle: async (ctx) => {
        const t0 = seen.started.get(ctx.messageId);
        if (t0 !== undefined) {
          seen.latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
          seen.started.delete(ctx.messageId);
          if (seen.started.size === 0) seen.waiting?.();
        }
        await sleep(p.handlerMs);
      },
    },
    {
      name: 'bench-search-index',
      topic: 'property.changed',
      handle: async () => {
        seen.floodHandled++;
        await sleep(p.handlerMs);
      },
    },
  ];
}

/** Until every booking written has been handled (at most 300 s). */
async function allBookingsHandled(seen: Seen, mode: NoisyMode): Promise<void> {
  if (seen.started.size === 0) return;
  const allHandled = new Promise<void>((resolve) => (seen.waiting = resolve));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    allHandled,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`noisy ${mode}: ${seen.started.size} bookings not handled within 300 s`)), 300_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** One mode, once, on `url` (a fresh migrated database). */
async function noisyNeighbour(url: string, mode: NoisyMode, p: NoisyParams) {
  const fair = mode !== 'fifo';
  const seen: Seen = { started: new Map(), latencies: [], floodHandled: 0 };
  const { started, latencies } = seen;
  const config = loadConfig({ DATABASE_URL: url, LOG_LEVEL: 'warn', MAIL_DIR: path.join(os.tmpdir(), 'stayhub-bench-mail') });
  const database = createDatabase(url, { max: config.WORKER_CONCURRENCY + 4, applicationName: 'bench-noisy-worker' });
  const worker = createConfiguredWorker({
    db: database.db,
    config,
    registry: new HandlerRegistry(noisyHandlers(seen, p)),
    logger: pino({ level: 'warn' }),
    housekeeping: false,
  });
  const producer = new pg.Client({ connectionString: url, application_name: 'bench-noisy-bookings' });
  const flooder = new pg.Client({ connectionString: url, application_name: 'bench-noisy-flood' });
  await producer.connect();
  await flooder.connect();
  await worker.start();
  try {
    const w0 = performance.now();
    let floodWriteMs = 0;
    const flood = (mode === 'quiet' ? Promise.resolve() : writeFlood(flooder, p.flood, fair)).then(() => {
      floodWriteMs = Math.round(performance.now() - w0);
    });
    const t0 = performance.now();
    const interval = 1000 / p.rate;
    const total = Math.round(p.rate * p.seconds);
    for (let i = 0; i < total; i++) {
      const due = t0 + i * interval;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      await book(producer, `host-${i % p.hosts}`, fair, started);
    }
    const floodPerSecond = seen.floodHandled / ((performance.now() - t0) / 1000);
    await allBookingsHandled(seen, mode);
    await flood;
    return {
      bookings: latencies.length,
      p50Ms: round(percentile(latencies, 50), 2),
      p99Ms: round(percentile(latencies, 99), 2),
      maxMs: round(Math.max(...latencies), 2),
      /** Flood messages handled while the bookings were being written, per second. */
      floodPerSecond: Math.round(floodPerSecond),
      /** How long writing the flood took (0 without one). */
      floodWriteMs,
    };
  } finally {
    await worker.stop();
    await database.close();
    await producer.end();
    await flooder.end();
  }
}

/** The flood, 1,000 rows a transaction (lib/outbox.ts fillFlood), each transaction with its wake-up. */
async function writeFlood(c: pg.Client, count: number, fair: boolean): Promise<void> {
  for (let i = 0; i < count; i += 1000) {
    const n = Math.min(1000, count - i);
    await c.query('begin');
    await fillFlood(c, 'property.changed', PROPERTY, n, fair ? { group: 'host-flood' } : null);
    await wakeUp(c, 'property.changed');
    await c.query('commit');
  }
}

/** A booking's event as enqueue writes it (fair) or as it was written before (FIFO), its wake-up inside its transaction. */
async function book(c: pg.Client, host: string, fair: boolean, started: Map<string, bigint>): Promise<void> {
  await c.query('begin');
  const id = await insertEvent(c, 'booking.created', BOOKING, fair ? host : null);
  started.set(id, process.hrtime.bigint());
  await c.query('commit');
}

/** The report's lines for the section. */
function renderNoisy(results: PartOf<typeof noisySection>): string[] {
  const r = results.noisy;
  if (!r) return [];
  const p = r.params;
  const row = (label: string, rep: Repeated<NoisyRun>) =>
    `| ${label} | ${mm(rep, 'p50Ms', 1)} / ${mm(rep, 'p99Ms', 1)} | ${rep.runs.map((v) => v.p99Ms.toFixed(1)).join(', ')} | ${mm(rep, 'floodPerSecond')} |`;
  return [
    `## Noisy neighbour (scripts/bench/noisy.ts)`,
    '',
    `${p.rate} bookings a second for ${p.seconds} s from ${p.hosts} hosts, each booking's email (commit → handler entered) measured; beside them, one host's ${p.flood.toLocaleString('en-US')} property changes written at the start, 1,000 a transaction. Handlers wait ${p.handlerMs} ms; the worker at its defaults, in-process. FIFO: the same writes without priority, group or turn, which the claim takes oldest first, as before.`,
    '',
    '| Bookings | email p50 / p99 (ms) | p99 of each run (ms) | flood handled/s meanwhile |',
    '|---|---:|---|---:|',
    row('alone', r.quiet),
    row('beside the flood, priorities and turns', r.fair),
    row('beside the flood, FIFO', r.fifo),
    '',
    `p99 beside the flood / alone (medians): with priorities and turns ${r.fairToQuietP99}×, FIFO ${r.fifoToQuietP99}×.`,
    '',
  ];
}
