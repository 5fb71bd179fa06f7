import { monitorEventLoopDelay } from 'node:perf_hooks';
import type pg from 'pg';
import type { Db } from '../db/client.ts';
import { poolLoad } from '../db/pool-load.ts';
import { pendingUpTo } from '../outbox/index.ts';

/**
 * The three numbers the API's admission control reads on every request, kept current in the
 * background so that reading them costs nothing: the event loop's delay (measured, as
 * @fastify/under-pressure measures it), and the outbox's backlog (sampled from the database).
 * The pools' expected wait is read live from the pools themselves (src/db/pool-load.ts).
 */
export interface LoadSignals {
  /** Mean event-loop delay over the last window (ms). */
  eventLoopDelayMs(): number;
  /** PENDING outbox messages at the last sample, counted no further than the cap given. */
  outboxPending(): number;
  /** A request let in: call what is returned once it is answered or its client has gone. */
  admitted(): () => void;
  /**
   * The wait for a database connection a request let in now can expect (ms): the requests in
   * flight beyond twice the pool's size (or the pool's own queue, if longer), at the rate requests
   * have lately been answered.
   */
  poolWaitMs(): number;
  start(): void;
  /** Stops the timers and waits for a sample in flight (it holds a pool connection). */
  stop(): Promise<void>;
}

/** The timer's period: the histogram's finest step, and what under-pressure subtracts from the mean. */
const RESOLUTION_MS = 10;
/** How often the delay is read and the histogram restarted: short, so a burst is seen within it. */
const WINDOW_MS = 250;

/** Answers per second are counted over the last four windows (a second). */
const RATE_WINDOWS = 4;
/**
 * The slowest a connection is taken to be held when the measured rate says less: a booking holds
 * one for a few milliseconds on a quiet machine and tens under load; 100 ms is the loaded case.
 */
const ASSUMED_HOLD_MS = 100;
/** A quiet second does not make the API forget what it answered before at once: a tenth less a window. */
const RATE_DECAY = 0.9;

export interface LoadSignalOptions {
  /** What the outbox is sampled through: the API's health pool, so a sample never queues behind requests. */
  db: Db;
  /** The pool every request uses (the main one). */
  pool: pg.Pool;
  /** 0: the outbox is not sampled (no threshold uses it). */
  outboxCap: number;
  outboxEveryMs: number;
  /** Told when a sample fails; the last good value is then dropped (0), so a dead database refuses nothing here. */
  onOutboxError?: (err: unknown) => void;
}

export function createLoadSignals(opts: LoadSignalOptions): LoadSignals {
  const delay = eventLoopDelay();
  const requests = requestFlow();
  const outbox = outboxSampler(opts);
  let timers: NodeJS.Timeout[] = [];
  return {
    eventLoopDelayMs: delay.ms,
    outboxPending: outbox.pending,
    admitted: requests.admitted,
    poolWaitMs: () => requests.poolWaitMs(opts.pool),
    start() {
      delay.enable();
      timers.push(setInterval(delay.read, WINDOW_MS).unref());
      timers.push(setInterval(requests.nextWindow, WINDOW_MS).unref());
      if (opts.outboxCap > 0) {
        outbox.sample(); // at once: an API started behind a deep backlog refuses from its first request
        timers.push(setInterval(outbox.sample, opts.outboxEveryMs).unref());
      }
    },
    async stop() {
      for (const t of timers) clearInterval(t);
      timers = [];
      delay.disable();
      await outbox.settled();
    },
  };
}

/** The event loop's delay, measured as @fastify/under-pressure measures it; `read` once a window. */
function eventLoopDelay() {
  const histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  let delayMs = 0;
  return {
    ms: () => delayMs,
    enable: () => histogram.enable(),
    disable: () => histogram.disable(),
    read: () => {
      // A window in which the 10 ms timer never fired: the loop was held longer than the window, or
      // this timer ran first in the same turn. The last value stands rather than a 0.
      if (histogram.count === 0) return;
      // The mean of a 10 ms timer's lateness: one long GC pause barely moves it; a loop where every
      // turn runs long (a thousand sockets answering at once) moves it all the way.
      delayMs = Math.max(0, histogram.mean / 1e6 - RESOLUTION_MS);
      histogram.reset();
    },
  };
}

/** Requests in flight, and the rate they have lately been answered at; `nextWindow` once a window. */
function requestFlow() {
  let inFlight = 0;
  const answered = new Array<number>(RATE_WINDOWS).fill(0);
  let current = 0;
  /** Requests answered per second, lately. */
  let rate = 0;
  return {
    admitted: () => {
      inFlight++;
      let open = true;
      return () => {
        if (!open) return;
        open = false;
        inFlight--;
        answered[current]!++;
      };
    },
    nextWindow: () => {
      rate = Math.max(
        answered.reduce((a, b) => a + b, 0),
        rate * RATE_DECAY,
      );
      current = (current + 1) % RATE_WINDOWS;
      answered[current] = 0;
    },
    poolWaitMs: (pool: pg.Pool) => {
      const load = poolLoad(pool);
      if (!load) return 0;
      // Little's law on the pool: requests beyond its size queue for a connection, served at the
      // rate requests are being answered. Measured, not predicted from idle hold times: a burst
      // admitted on the quiet API's numbers took seconds per connection once it was in (ADR 0034).
      // In flight up to twice the pool's size is never a queue, so a quiet API takes a small burst
      // whatever it measured lately. The rate is taken as at least the pool's with every
      // connection held ASSUMED_HOLD_MS: an API that has answered little lately (just started, or
      // quiet) knows no rate, and a burst of a few dozen bookings on it is not an overload (60 at
      // once through PgBouncer were refused 59 times on a rate of one a second).
      const queue = Math.max(load.waiting, inFlight - 2 * load.max);
      if (queue <= 0) return 0;
      return (1000 * queue) / Math.max(rate, (load.max * 1000) / ASSUMED_HOLD_MS);
    },
  };
}

/** The outbox's PENDING count (up to the cap), sampled from the database. */
function outboxSampler(opts: LoadSignalOptions) {
  let pending = 0;
  let sampling: Promise<void> | undefined;
  return {
    pending: () => pending,
    /** Waits for a sample in flight (it holds a pool connection). */
    settled: () => sampling,
    sample: () => {
      if (sampling) return; // a slow sample is not stacked on: the next period takes over
      sampling = pendingUpTo(opts.db, opts.outboxCap)
        .then(
          (n) => {
            pending = n;
          },
          (err: unknown) => {
            pending = 0;
            opts.onOutboxError?.(err);
          },
        )
        .finally(() => {
          sampling = undefined;
        });
    },
  };
}
