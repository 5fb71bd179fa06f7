import { EventEmitter, setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import {
  activeTraceId,
  inSpan,
  markActiveSpanFailed,
  MESSAGING,
  placeAfterHop,
  SpanKind,
  tracingOn,
  withoutPropagation,
} from '../../telemetry/tracing.ts';
import { signatureHeader } from '../secret.ts';
import { claimDeliveries, type ClaimedDelivery } from './claim.ts';
import { DoneBatcher } from '../../outbox/index.ts';
import { recordAttempt, recordSuccesses, type Success } from './record.ts';
import { judge, type Verdict } from './schedule.ts';
import type { Network } from '../address-policy.ts';
import { ConnectionPool } from './connections.ts';
import { sendOnce } from './send.ts';

/** One attempt's outcome, for metrics and tests. */
export interface AttemptEvent {
  endpointId: string;
  eventType: string;
  outcome: Verdict['kind'];
  status: number | null;
  durationMs: number;
}

export interface WebhookSenderEvents {
  attempt: [AttemptEvent];
}

export interface WebhookSender {
  /** Claim now instead of at the next poll: the fan-out handler calls it after writing deliveries. */
  wake(): void;
  start(): void;
  /** Stops claiming and waits for the attempts in flight; those still running at `graceMs` are abandoned to their lease. */
  stop(graceMs?: number): Promise<void>;
  /** Sends what is due until nothing is (tests, `--until-empty`): resolves when a claim finds nothing and nothing is in flight. */
  runUntilIdle(): Promise<void>;
  readonly events: EventEmitter<WebhookSenderEvents>;
}

export type SenderConfig = Pick<
  Config,
  | 'WEBHOOK_RETRY_SCHEDULE_SECONDS'
  | 'WEBHOOK_TIMEOUT_MS'
  | 'WEBHOOK_CONNECT_TIMEOUT_MS'
  | 'WEBHOOK_CONCURRENCY'
  | 'WEBHOOK_ENDPOINT_CONCURRENCY'
  | 'WEBHOOK_DISABLE_AFTER_HOURS'
  | 'WEBHOOK_ALLOW_PRIVATE_NETWORKS'
  | 'WEBHOOK_KEEP_ALIVE'
  | 'WEBHOOK_EXTRA_PORTS'
  | 'WEBHOOK_HOST_CONCURRENCY'
  | 'WEBHOOK_ATTEMPTS_KEPT'
  | 'POLL_INTERVAL_MS'
  | 'WEBHOOK_TRACE_CONTEXT'
>;

const USER_AGENT = 'StayHub-Webhooks/1.0';

/**
 * The worker's webhook sender: a loop of its own beside the outbox runner, so an endpoint that
 * hangs for its whole timeout holds one of WEBHOOK_CONCURRENCY sender slots (at most
 * WEBHOOK_ENDPOINT_CONCURRENCY of them, and its host's endpoints together WEBHOOK_HOST_CONCURRENCY), never an outbox slot: bookings, emails and the events
 * relay do not wait for hosts' servers.
 *
 * claim (claim.ts) → POST (send.ts) → judge (schedule.ts) → record (record.ts), per delivery,
 * with as many in flight as there are free slots. A success frees its slot when its answer is in,
 * before it is recorded (the lease keeps the delivery from being claimed again meanwhile), and
 * successes are recorded together, many in one statement (group commit, as the outbox's DONE): on
 * a fast endpoint the database, not the slots, was the limit. A failure holds its slot until it
 * is recorded.
 */
export function createWebhookSender(deps: {
  db: Db;
  pool: pg.Pool;
  config: SenderConfig;
  logger: Logger;
  /** How hosts are resolved and which addresses are public (default: the system's; tests play DNS answers with it). */
  network?: Network;
}): WebhookSender {
  const { config } = deps;
  // Kept-alive connections per checked address, for this sender's life (connections.ts).
  const connections = config.WEBHOOK_KEEP_ALIVE ? new ConnectionPool() : undefined;
  const log = deps.logger.child({ component: 'webhooks' });
  const events = new EventEmitter<WebhookSenderEvents>();
  const inFlight = new Map<number, number>();
  const hostInFlight = new Map<number, number>();
  const running = new Set<Promise<void>>();
  /** Attempts in their HTTP exchange: what the slots count. `running` also holds those being recorded. */
  let sending = 0;
  const successes = new DoneBatcher<Success>((items) => recordSuccesses(deps.pool, items, config.WEBHOOK_ATTEMPTS_KEPT));
  /** Free slots: WEBHOOK_CONCURRENCY less those sending, and no more than that many again waiting to be recorded. */
  const room = () => Math.min(config.WEBHOOK_CONCURRENCY - sending, 2 * config.WEBHOOK_CONCURRENCY - running.size);
  /** Resolves at the next slot freed or attempt finished (runUntilIdle waits on it). */
  const nextChange = () => {
    let resolve!: () => void;
    const promise = new Promise<void>((r) => (resolve = r));
    return { promise, resolve };
  };
  let changed = nextChange();
  const signalChange = () => {
    changed.resolve();
    changed = nextChange();
  };
  const abort = new AbortController();
  setMaxListeners(config.WEBHOOK_CONCURRENCY + 10, abort.signal); // one listener per attempt in flight
  // The lease: the attempt's time limit and time to record it. A worker killed mid-attempt leaves
  // the delivery to be claimed again after this, and sent again with the same webhook-id.
  const leaseSeconds = Math.ceil((config.WEBHOOK_TIMEOUT_MS + config.WEBHOOK_CONNECT_TIMEOUT_MS) / 1000) + 30;
  let stopping = false;
  let loop: Promise<void> | undefined;
  let wakeUp: (() => void) | undefined;
  let wakeRequested = false;

  const wake = () => {
    wakeRequested = true;
    wakeUp?.();
  };

  /**
   * One attempt in its span (tracing on): the first attempt of a round continues the trace of the
   * fan-out that made the delivery, a later one is a new trace linked to it (the schedule spaces
   * them up to 10 hours: docs/adr/0031-retries-start-a-linked-trace.md). The HTTP client span
   * below it carries `traceparent` to the host, unless WEBHOOK_TRACE_CONTEXT is off.
   */
  function tracedAttempt(d: ClaimedDelivery, release: () => void): Promise<void> {
    if (!tracingOn()) return attempt(d, release);
    return inSpan(
      `send webhook ${d.eventType}`,
      {
        kind: SpanKind.PRODUCER,
        ...placeAfterHop(d, d.attempt <= 1),
        attributes: {
          [MESSAGING.system]: 'webhook',
          [MESSAGING.operationType]: 'send',
          [MESSAGING.destination]: d.endpointPublicId,
          [MESSAGING.messageId]: d.publicId,
          'stayhub.webhook.attempt': d.attempt,
        },
      },
      () => attempt(d, release),
    );
  }

  /** `release`: frees the attempt's slot, once its exchange is over. */
  async function attempt(d: ClaimedDelivery, release: () => void): Promise<void> {
    const timestamp = Math.floor(Date.now() / 1000);
    const send = config.WEBHOOK_TRACE_CONTEXT ? sendOnce : (o: Parameters<typeof sendOnce>[0]) => withoutPropagation(() => sendOnce(o));
    const result = await send({
      url: d.url,
      body: d.body,
      headers: {
        'user-agent': USER_AGENT,
        'webhook-id': d.publicId,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatureHeader(d.secrets, d.publicId, timestamp, d.body),
      },
      timeoutMs: config.WEBHOOK_TIMEOUT_MS,
      connectTimeoutMs: config.WEBHOOK_CONNECT_TIMEOUT_MS,
      allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
      extraPorts: config.WEBHOOK_EXTRA_PORTS,
      signal: abort.signal,
      connections,
      network: deps.network,
    });
    if (abort.signal.aborted) return; // forced stop: the lease brings it back
    const verdict = judge(result, d.attempt, config.WEBHOOK_RETRY_SCHEDULE_SECONDS);
    if (verdict.kind !== 'succeeded') markActiveSpanFailed(result.error ?? `answered ${result.status}`);
    // A success frees its slot now; a failure holds it until recorded, since recording it may
    // disable the endpoint (410, or failing too long), and no next attempt may go out before.
    if (verdict.kind === 'succeeded') release();
    const recorded =
      verdict.kind === 'succeeded'
        ? { settled: await successes.add({ d, result, traceId: activeTraceId() }), disabled: undefined }
        : await recordAttempt(deps.db, d, result, verdict, {
            disableAfterHours: config.WEBHOOK_DISABLE_AFTER_HOURS,
            attemptsKept: config.WEBHOOK_ATTEMPTS_KEPT,
          });
    const line = {
      delivery: d.publicId,
      endpoint: d.endpointPublicId,
      type: d.eventType,
      attempt: d.attempt,
      status: result.status,
      ms: result.durationMs,
      outcome: verdict.kind,
    };
    if (verdict.kind === 'succeeded') log.debug(line, 'webhook delivered');
    else
      log.warn(
        { ...line, error: result.error, retryInSeconds: verdict.kind === 'retry' ? Math.round(verdict.delaySeconds) : undefined },
        'webhook attempt failed',
      );
    if (recorded.disabled) log.warn({ endpoint: d.endpointPublicId, reason: recorded.disabled }, 'webhook endpoint disabled');
    events.emit('attempt', {
      endpointId: d.endpointPublicId,
      eventType: d.eventType,
      outcome: verdict.kind,
      status: result.status,
      durationMs: result.durationMs,
    });
  }

  const add = (m: Map<number, number>, key: number, by: number) => {
    const n = (m.get(key) ?? 0) + by;
    if (n > 0) m.set(key, n);
    else m.delete(key);
  };

  function launch(d: ClaimedDelivery) {
    add(inFlight, d.endpointId, 1);
    add(hostInFlight, d.hostId, 1);
    sending++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      add(inFlight, d.endpointId, -1);
      add(hostInFlight, d.hostId, -1);
      sending--;
      signalChange();
      wake();
    };
    const p = tracedAttempt(d, release)
      .catch((err: unknown) =>
        log.error({ err, delivery: d.publicId }, 'webhook attempt could not be recorded; its lease will bring it back'),
      )
      .finally(() => {
        release();
        running.delete(p);
        signalChange();
        wake();
      });
    running.add(p);
  }

  /** One claim for the free slots; returns how many deliveries it started. */
  async function claimOnce(): Promise<number> {
    const claimed = await claimDeliveries(deps.pool, {
      limit: room(),
      perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY,
      perHost: config.WEBHOOK_HOST_CONCURRENCY,
      inFlight,
      hostInFlight,
      leaseSeconds,
    });
    for (const d of claimed) launch(d);
    return claimed.length;
  }

  async function run(): Promise<void> {
    while (!stopping) {
      wakeRequested = false;
      try {
        if (room() > 0 && (await claimOnce()) > 0) continue;
      } catch (err) {
        log.error({ err }, 'webhook claim failed; trying again at the next poll');
      }
      if (wakeRequested || stopping) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, config.POLL_INTERVAL_MS);
        wakeUp = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wakeUp = undefined;
    }
  }

  return {
    events,
    wake,
    start() {
      loop ??= run();
    },
    async stop(graceMs = 30_000) {
      stopping = true;
      wakeUp?.();
      await loop;
      const all = Promise.all(running);
      // The grace timer is cancelled once the attempts are done: a pending timer would keep the
      // process alive for the rest of graceMs after everything else has stopped.
      const grace = new AbortController();
      const timedOut = await Promise.race([all.then(() => false), sleep(graceMs, true, { signal: grace.signal }).catch(() => false)]);
      grace.abort();
      if (timedOut) {
        abort.abort();
        await all;
      }
      connections?.close();
    },
    async runUntilIdle() {
      for (;;) {
        // A claim made while attempts were in flight may find nothing only because their
        // endpoint or host was full: it proves nothing is due unless nothing was in flight.
        const inFlightAtClaim = running.size;
        const next = changed.promise;
        const started = room() > 0 ? await claimOnce() : 0;
        if (started > 0) continue;
        if (running.size > 0) await next;
        else if (inFlightAtClaim === 0) return;
      }
    },
  };
}
