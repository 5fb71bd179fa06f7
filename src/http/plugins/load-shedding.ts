import type { FastifyInstance, FastifyReply, FastifyRequest, preParsingHookHandler } from 'fastify';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Config } from '../../config.ts';
import type { Database } from '../../db/client.ts';
import type { SearchIndex } from '../../search/search-index.ts';
import { createLoadSignals, type LoadSignals } from '../load-signals.ts';
import { problem, sendProblem } from '../problem.ts';

/**
 * Admission control: a request is refused with 503 `overloaded` and Retry-After before it does
 * any work (before authentication, its body, a database connection) when the API is already
 * past what it can answer in time. A request let in counts as in flight while it works (its
 * onRequest hooks, authentication among them, then from preValidation, once its body is in), not
 * while it waits for its client to send the body: a client that sends headers and stalls the body
 * holds no slot (ADR 0041; the timeouts that close it are src/http/slow-clients.ts). Queued instead, every request waits: under 1,000 clients
 * bookings took 8 s each and timed out in the pool (ADR 0034).
 *
 * Three signals, each with a threshold per class of request:
 *   - event-loop delay: the process's CPU is spent (src/http/load-signals.ts);
 *   - expected pool wait: the database connections are spent (src/db/pool-load.ts), the search
 *     index's too for GET /search;
 *   - outbox backlog: the worker is behind, and every accepted booking adds to its queue.
 * Reads (GET, HEAD: search and listings) have the lower thresholds, so they are refused first and
 * bookings keep what is left. /health and /metrics are never refused: they are how an operator
 * sees the overload.
 */

export type RequestClass = 'reads' | 'writes';
export type ShedSignal = 'event_loop' | 'pool' | 'outbox';

const CLASSES: readonly RequestClass[] = ['reads', 'writes'];
const SIGNALS: readonly ShedSignal[] = ['event_loop', 'pool', 'outbox'];
const NEVER_REFUSED = new Set(['/health', '/metrics']);
const REFUSED = 'The service has more work than it can answer in time; retry after Retry-After seconds';
/** Routes that wait on the search index's own pool as well as the main one. */
const ON_SEARCH_POOL = new Set(['/search']);

interface Thresholds {
  eventLoopDelayMs: number;
  poolWaitMs: number;
  outboxPending: number;
}

export interface LoadSheddingOptions {
  config: Config;
  db: Database;
  /** The small pool the outbox backlog is sampled through, off the busy one (src/db/health-database.ts). */
  healthDb: Database;
  searchIndex?: SearchIndex;
  registry: Registry;
}

/** What admission control would refuse now (every signal at its threshold), as GET /health reports it. */
export interface LoadState {
  refusing: 'nothing' | 'reads' | 'everything';
  eventLoopDelayMs: number;
  poolWaitMs: number;
}

export function thresholdsOf(config: Config): Record<RequestClass, Thresholds> {
  return {
    reads: {
      eventLoopDelayMs: config.LOAD_SHED_READS_EVENT_LOOP_DELAY_MS,
      poolWaitMs: config.LOAD_SHED_READS_POOL_WAIT_MS,
      outboxPending: config.LOAD_SHED_READS_OUTBOX_PENDING,
    },
    writes: {
      eventLoopDelayMs: config.LOAD_SHED_WRITES_EVENT_LOOP_DELAY_MS,
      poolWaitMs: config.LOAD_SHED_WRITES_POOL_WAIT_MS,
      outboxPending: config.LOAD_SHED_WRITES_OUTBOX_PENDING,
    },
  };
}

/** Past a threshold (0: that signal is off). */
const over = (value: number, threshold: number) => threshold > 0 && value > threshold;

export function registerLoadShedding(app: FastifyInstance, opts: LoadSheddingOptions): () => LoadState {
  const { config, db, searchIndex, registry } = opts;
  const thresholds = thresholdsOf(config);
  const signals = createLoadSignals({
    db: opts.healthDb.db,
    pool: db.pool,
    outboxCap: config.LOAD_SHEDDING ? Math.max(thresholds.reads.outboxPending, thresholds.writes.outboxPending) + 1 : 0,
    outboxEveryMs: config.LOAD_SHED_OUTBOX_CHECK_MS,
    onOutboxError: (err) => app.log.debug({ err }, 'load shedding: the outbox backlog could not be read'),
  });
  const mainWait = () => signals.poolWaitMs();
  const searchWait = () => searchIndex?.expectedWaitMs() ?? 0;

  const shed = registerMetrics(registry, signals, mainWait, searchIndex ? searchWait : undefined);

  app.addHook('onReady', async () => signals.start());
  app.addHook('onClose', async () => signals.stop());
  const { working, idle } = inFlight(signals);
  const retryAfter = String(config.LOAD_SHED_RETRY_AFTER_SECONDS);
  const refusalDelayMs = config.LOAD_SHED_REFUSAL_DELAY_MS;
  const signalOver = (route: string | undefined, t: Thresholds): ShedSignal | undefined => {
    if (over(signals.eventLoopDelayMs(), t.eventLoopDelayMs)) return 'event_loop';
    const wait = route !== undefined && ON_SEARCH_POOL.has(route) ? Math.max(mainWait(), searchWait()) : mainWait();
    if (over(wait, t.poolWaitMs)) return 'pool';
    if (over(signals.outboxPending(), t.outboxPending)) return 'outbox';
    return undefined;
  };

  // A callback hook, not an async one: it runs on every request, and most of the time does nothing.
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const route = request.routeOptions.url;
    if (route !== undefined && NEVER_REFUSED.has(route)) return done();
    const cls: RequestClass = request.method === 'GET' || request.method === 'HEAD' ? 'reads' : 'writes';
    // Off, every request is let in.
    const signal = config.LOAD_SHEDDING ? signalOver(route, thresholds[cls]) : undefined;
    if (!signal) {
      working(request, reply);
      return done();
    }
    shed.inc({ class: cls, signal });
    reply.header('retry-after', retryAfter);
    // Fastify sends this reply and skips the rest of the request (done is not called). After a
    // pause: clients that retry at once (as load generators do) otherwise kept the API busy with
    // nothing but refusals, and the bookings it had let in waited behind them (ADR 0034). The
    // pause costs a timer; the request holds nothing else.
    const refuse = () => void sendProblem(reply, problem('overloaded', REFUSED));
    if (refusalDelayMs > 0) setTimeout(refuse, refusalDelayMs);
    else refuse();
  });
  // Waiting for the body, a request is not in flight; once it is in (preValidation), it is again.
  // A body already in memory is read within the same turn of the event loop: no other request is
  // weighed meanwhile, so for every request but a slow one this changes nothing.
  app.addHook('preParsing', (request: FastifyRequest, _reply: FastifyReply, payload: RequestPayload, done: PreParsingDone) => {
    idle(request);
    done(null, payload);
  });
  app.addHook('preValidation', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const route = request.routeOptions.url;
    if (route === undefined || !NEVER_REFUSED.has(route)) working(request, reply);
    done();
  });

  return () => {
    const state = (t: Thresholds) => config.LOAD_SHEDDING && signalOver(undefined, t) !== undefined;
    return {
      refusing: state(thresholds.writes) ? 'everything' : state(thresholds.reads) ? 'reads' : 'nothing',
      eventLoopDelayMs: Math.round(signals.eventLoopDelayMs()),
      poolWaitMs: Math.round(mainWait()),
    };
  };
}

/** The refusals counted, and the signals as gauges (read when Prometheus scrapes). */
function registerMetrics(registry: Registry, signals: LoadSignals, mainWait: () => number, searchWait?: () => number) {
  const shed = new Counter({
    name: 'stayhub_http_shed_requests_total',
    help: 'Requests refused with 503 overloaded before any work, by class (reads: GET and HEAD; writes: the rest) and the signal past its threshold.',
    labelNames: ['class', 'signal'] as const,
    registers: [registry],
  });
  for (const c of CLASSES) for (const s of SIGNALS) shed.inc({ class: c, signal: s }, 0);
  new Gauge({
    name: 'stayhub_http_event_loop_delay_seconds',
    help: "Mean event-loop delay over the last quarter second: the API's CPU signal for load shedding.",
    registers: [registry],
    collect() {
      this.set(signals.eventLoopDelayMs() / 1000);
    },
  });
  new Gauge({
    name: 'stayhub_http_pool_expected_wait_seconds',
    help: 'The wait for a database connection a request joining the queue now can expect, by pool (main, search).',
    labelNames: ['pool'] as const,
    registers: [registry],
    collect() {
      this.set({ pool: 'main' }, mainWait() / 1000);
      if (searchWait) this.set({ pool: 'search' }, searchWait() / 1000);
    },
  });
  return shed;
}

type RequestPayload = Parameters<preParsingHookHandler>[2];
type PreParsingDone = Parameters<preParsingHookHandler>[3];

/** Marks a request in flight (`working`) or not (`idle`): each request holds at most one slot, given back once. */
function inFlight(signals: LoadSignals) {
  const slots = new WeakMap<FastifyRequest, () => void>();
  const idle = (request: FastifyRequest) => {
    slots.get(request)?.();
    slots.delete(request);
  };
  return {
    idle,
    working: (request: FastifyRequest, reply: FastifyReply) => {
      // A client gone meanwhile: its 'close' has come and gone, so it would never be given back.
      if (reply.raw.destroyed || request.raw.socket.destroyed || slots.has(request)) return;
      const release = signals.admitted();
      slots.set(request, release);
      // 'close' comes once the answer is sent or the client went away first, whichever happens.
      reply.raw.once('close', () => idle(request));
    },
  };
}
