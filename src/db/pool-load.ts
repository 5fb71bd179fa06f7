import type pg from 'pg';

/**
 * How busy a pool is, read from its own events: what admission control asks before it lets a
 * request queue for a connection, and what tells "every connection is busy" from "the database
 * is not answering" when a wait for a connection times out.
 */
export interface PoolLoad {
  /** Connections the pool may open (its `max`). */
  max: number;
  /** Requests waiting for a connection right now. */
  waiting: number;
  /** How long a connection is held, smoothed over the last few dozen uses (ms); 0 before the first. */
  holdMs: number;
  /**
   * The wait a request joining the queue now can expect (ms): the queue ahead of it, served by
   * `max` connections each held `holdMs`. Known at once, before anyone has waited that long, so a
   * burst is refused as it arrives instead of after its first requests time out.
   */
  expectedWaitMs: number;
}

interface Watch {
  pool: pg.Pool;
  max: number;
  holdMs: number;
  /** performance.now() of the last connection given back without an error. */
  lastHealthyRelease: number;
  acquiredAt: WeakMap<pg.PoolClient, number>;
}

const watches = new WeakMap<pg.Pool, Watch>();

/** Weight of the newest hold time in the average: about the last 30 uses count. */
const HOLD_SMOOTHING = 1 / 16;

/** pg-pool's message when a request waited connectionTimeoutMillis in its queue (not a failed connect). */
const QUEUE_TIMEOUT = 'timeout exceeded when trying to connect';

/** Starts following `pool`'s connections (once per pool; later calls do nothing). Returns the pool. */
export function watchPool(pool: pg.Pool): pg.Pool {
  if (watches.has(pool)) return pool;
  const w: Watch = {
    pool,
    max: pool.options.max ?? 10,
    holdMs: 0,
    lastHealthyRelease: Number.NEGATIVE_INFINITY,
    acquiredAt: new WeakMap(),
  };
  watches.set(pool, w);
  pool.on('acquire', (client) => w.acquiredAt.set(client, performance.now()));
  pool.on('release', (err: Error | undefined, client: pg.PoolClient) => {
    const now = performance.now();
    const since = w.acquiredAt.get(client);
    if (since !== undefined) {
      const held = now - since;
      w.holdMs = w.holdMs === 0 ? held : w.holdMs + HOLD_SMOOTHING * (held - w.holdMs);
    }
    if (!err) w.lastHealthyRelease = now;
  });
  return pool;
}

/** The load of a pool that `watchPool` follows; undefined for one it does not. */
export function poolLoad(pool: pg.Pool): PoolLoad | undefined {
  const w = watches.get(pool);
  if (!w) return undefined;
  const waiting = pool.waitingCount;
  return { max: w.max, waiting, holdMs: w.holdMs, expectedWaitMs: (waiting * w.holdMs) / w.max };
}

/**
 * True when `err` is a request that waited its whole connectionTimeoutMillis in `pool`'s queue
 * while the pool went on handing connections back healthy: every connection was busy serving
 * others, so the database is up and the service is overloaded. The same timeout with no healthy
 * release for two waits means the connections are stuck (a hung server, a network gone): that
 * one stays "database unavailable" (src/db/pg-errors.ts).
 */
export function isPoolExhausted(err: unknown, pool: pg.Pool): boolean {
  const w = watches.get(pool);
  if (!w || !hasQueueTimeout(err)) return false;
  // Over two waits, not one: the error reaches this check some time after the wait ran out (late
  // under the very overload it is about), and a connection handed back just after the request
  // joined the queue must still count.
  const waited = pool.options.connectionTimeoutMillis ?? 0;
  return performance.now() - w.lastHealthyRelease <= 2 * waited;
}

function hasQueueTimeout(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if ((e as { message?: unknown }).message === QUEUE_TIMEOUT) return true;
  }
  return false;
}
