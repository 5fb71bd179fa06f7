import { EventEmitter, setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/client.ts';
import type { Logger } from '../../logger.ts';
import { DoneBatcher } from '../../outbox/index.ts';
import type { Network } from '../address-policy.ts';
import { tracedAttempt, type AttemptDeps, type WebhookSenderEvents } from './attempt.ts';
import { ConnectionPool } from './connections.ts';
import { OutageLog } from './outage-log.ts';
import { recordSuccesses, type Success } from './record.ts';
import type { SlotStats } from './local-queue.ts';
import { SenderSlots } from './slots.ts';

export interface WebhookSender {
  /** Claim now instead of at the next poll: the fan-out handler calls it after writing deliveries. */
  wake(): void;
  start(): void;
  /** Stops claiming and waits for the attempts in flight; those still running at `graceMs` are abandoned to their lease. */
  stop(graceMs?: number): Promise<void>;
  /** Sends what is due until nothing is (tests, `--until-empty`): resolves when a claim finds nothing and nothing is in flight. */
  runUntilIdle(): Promise<void>;
  /** Its attempts as they start and end, and who holds its slots now (the worker's metrics). */
  readonly events: EventEmitter<WebhookSenderEvents> & { slots(): SlotStats };
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
  | 'WEBHOOK_IDLE_OWNER_SLOTS'
  | 'WEBHOOK_ATTEMPTS_KEPT'
  | 'POLL_INTERVAL_MS'
  | 'WEBHOOK_TRACE_CONTEXT'
>;

interface SenderDeps {
  db: Db;
  pool: pg.Pool;
  config: SenderConfig;
  logger: Logger;
  /** How hosts are resolved and which addresses are public (default: the system's; tests play DNS answers with it). */
  network?: Network;
}

/**
 * The worker's webhook sender: a loop of its own beside the outbox runner, so an endpoint that
 * hangs for its whole timeout holds one of WEBHOOK_CONCURRENCY sender slots (at most
 * WEBHOOK_ENDPOINT_CONCURRENCY of them, and its host's endpoints together
 * WEBHOOK_HOST_CONCURRENCY), never an outbox slot: bookings, emails and the events relay do not
 * wait for hosts' servers.
 *
 * claim (claim.ts) → local queue (local-queue.ts) → POST (send.ts) → judge (schedule.ts) →
 * record (record.ts). The claim takes the next round ahead, so a freed slot starts the next
 * delivery at once. A success frees its slot when its answer is in, before it is recorded (the
 * lease keeps the delivery from being claimed again meanwhile), and successes are recorded
 * together, many in one statement (group commit, as the outbox's DONE). A failure holds its slot
 * until it is recorded, and one that disabled its endpoint gives the endpoint's queued deliveries
 * back before anything else of the endpoint can start.
 */
export function createWebhookSender(deps: SenderDeps): WebhookSender {
  const { config } = deps;
  const log = deps.logger.child({ component: 'webhooks' });
  const events = Object.assign(new EventEmitter<WebhookSenderEvents>(), { slots: (): SlotStats => slots.stats() });
  const abort = new AbortController();
  setMaxListeners(config.WEBHOOK_CONCURRENCY + 10, abort.signal); // one listener per attempt in flight
  // Kept-alive connections per checked address, for this sender's life (connections.ts).
  const connections = config.WEBHOOK_KEEP_ALIVE ? new ConnectionPool() : undefined;
  const successes = new DoneBatcher<Success>((items) => recordSuccesses(deps.pool, items, config.WEBHOOK_ATTEMPTS_KEPT));
  const attemptDeps: AttemptDeps = { ...deps, log, events, successes, signal: abort.signal, connections };
  let wake = () => {};
  // One line when the database goes away and one when it is back, not a stack trace per poll.
  const outage = new OutageLog(log);
  const slots = new SenderSlots(
    { ...deps, outage },
    (d, release) => {
      events.emit('started', { attempt: d.attempt, waitMs: Math.max(0, Date.now() - d.dueAt) });
      return tracedAttempt(attemptDeps, d, release);
    },
    () => wake(),
  );
  const loop = claimLoop(slots, config.POLL_INTERVAL_MS, outage);
  wake = loop.wake;

  return {
    events,
    wake: () => loop.wake(),
    start: () => loop.start(),
    async stop(graceMs = 30_000) {
      const closed = slots.close();
      await loop.stop();
      await closed;
      const all = Promise.all(slots.running);
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
        const busyAtClaim = slots.busy();
        const next = slots.nextChange();
        if ((await slots.claimOnce()) > 0) continue;
        if (slots.busy()) await next;
        else if (!busyAtClaim) return;
      }
    },
  };
}

/** Claims whenever there is room and something may be due: at once when woken, else every poll interval. */
function claimLoop(slots: SenderSlots, pollMs: number, outage: OutageLog) {
  let stopping = false;
  let loop: Promise<void> | undefined;
  let wakeUp: (() => void) | undefined;
  let wakeRequested = false;
  const wake = () => {
    wakeRequested = true;
    wakeUp?.();
  };

  async function run(): Promise<void> {
    while (!stopping) {
      wakeRequested = false;
      try {
        const claimed = slots.canClaim() ? await slots.claimOnce() : -1;
        if (claimed >= 0) outage.succeeded();
        if (claimed > 0) continue;
      } catch (err) {
        outage.failed(err, 'claim', 'webhook claim failed; trying again at the next poll');
      }
      if (wakeRequested || stopping) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, pollMs);
        wakeUp = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wakeUp = undefined;
    }
  }

  return {
    wake,
    start() {
      loop ??= run();
    },
    async stop() {
      stopping = true;
      wakeUp?.();
      await loop;
    },
  };
}
