import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Config } from '../config.ts';
import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import { claimBatch, type ClaimedMessage } from '../outbox/claim.ts';
import { purgeDone } from '../outbox/purge.ts';
import { DoneBatcher, extendLease, handBack } from '../outbox/settle.ts';
import { OUTBOX_CHANNEL } from '../outbox/topics.ts';
import { dispatch, type DispatchContext, type MessageOutcome } from './dispatch.ts';
import { OutboxListener } from './listener.ts';
import type { HandlerRegistry } from './registry.ts';

/**
 * The worker loop, usable in-process (tests, other tools) and by src/worker/drain-outbox.ts.
 *
 *   const worker = createWorker({ db, config, registry, logger });
 *   await worker.runOnce();        // claim one batch, process it, return how many were claimed
 *   await worker.runUntilEmpty();  // until a claim finds nothing due; returns the total claimed
 *   await worker.start();          // run: LISTEN + fallback poll + housekeeping, until stop()
 *   await worker.stop();           // stop claiming, finish in-flight, hand back the rest
 *
 * ## Events (a stable contract: the metrics code subscribes to them)
 *
 * `worker.events` is an EventEmitter with:
 *
 * - `'claimed'`  `{ count: number }` — after every claim that returned at least one message.
 * - `'outcome'`  `OutcomeEvent` — once per handler outcome, and once per message for the
 *   message-level outcomes (handler: null):
 *     - `messageId`  the message's public id (uuid)
 *     - `topic`      e.g. 'booking.created'
 *     - `handler`    the handler's name, or null for 'unknown_topic', 'handed_back', and a
 *                    'dead' decided before any handler ran (invalid payload, too many claims)
 *     - `attempt`    the attempt number (1 on the first delivery)
 *     - `outcome`    'done' (this handler succeeded) | 'retry' (failed; the message backs off) |
 *                    'dead' (failed; the message is DEAD) | 'unknown_topic' (no handler; left
 *                    PENDING, attempt not counted) | 'handed_back' (claimed, never started,
 *                    returned at shutdown)
 *     - `durationMs` how long the handler ran (0 for handed_back)
 *     - `error`      for 'retry' and 'dead': "handler: ErrorClass: message", email addresses removed
 *
 * The same fields are logged, one line per outcome ('outbox handler outcome').
 */
export type Outcome = 'done' | 'retry' | 'dead' | 'unknown_topic' | 'handed_back';

export interface OutcomeEvent {
  messageId: string;
  topic: string;
  handler: string | null;
  attempt: number;
  outcome: Outcome;
  durationMs: number;
  error?: string;
}

export interface WorkerEvents {
  claimed: [{ count: number }];
  outcome: [OutcomeEvent];
}

/** Messages by final outcome, for the shutdown summary. */
export interface WorkerSummary {
  claimed: number;
  done: number;
  retried: number;
  dead: number;
  unknownTopic: number;
  handedBack: number;
  /** Claims that were superseded before we could settle them (our lease had run out). */
  lost: number;
  purged: number;
}

export interface WorkerOptions {
  db: Db;
  config: Config;
  registry: HandlerRegistry;
  logger: Logger;
  /** Defaults: WORKER_BATCH_SIZE, WORKER_CONCURRENCY. */
  batchSize?: number;
  concurrency?: number;
  /** start() LISTENs on the outbox channel (default true). Without it the worker only polls. */
  listen?: boolean;
  /** start() purges old DONE rows every OUTBOX_PURGE_INTERVAL_SECONDS (default true). */
  purge?: boolean;
  /** For the backoff jitter; Math.random otherwise. */
  random?: () => number;
}

export interface Worker {
  readonly events: EventEmitter<WorkerEvents>;
  runOnce(): Promise<number>;
  runUntilEmpty(): Promise<number>;
  start(): Promise<void>;
  /** Idempotent; resolves with the summary once in-flight handlers finished and the rest was handed back. */
  stop(): Promise<WorkerSummary>;
  /** Aborts in-flight handlers' AbortSignal (second signal, shutdown timeout). Does not wait. */
  abort(): void;
  summary(): WorkerSummary;
}

interface Queued extends ClaimedMessage {
  /** Local clock when the claim returned: a message whose lease has run out locally is not started. */
  claimedAtMs: number;
}

export function createWorker(opts: WorkerOptions): Worker {
  return new OutboxWorker(opts);
}

class OutboxWorker implements Worker {
  readonly events = new EventEmitter<WorkerEvents>();
  private readonly db: Db;
  private readonly config: Config;
  private readonly log: Logger;
  private readonly batchSize: number;
  private readonly concurrency: number;
  private readonly abortController = new AbortController();
  private readonly dispatchCtx: DispatchContext;
  private readonly counts: WorkerSummary = {
    claimed: 0, done: 0, retried: 0, dead: 0, unknownTopic: 0, handedBack: 0, lost: 0, purged: 0,
  };

  private readonly queue: Queued[] = [];
  private readonly active = new Set<Promise<void>>();
  private stopping = false;
  private stopPromise: Promise<WorkerSummary> | undefined;
  private loopPromise: Promise<void> | undefined;
  private claiming: Promise<number> | undefined;
  private listener: OutboxListener | undefined;
  private purgeTimer: NodeJS.Timeout | undefined;
  private purging: Promise<void> | undefined;
  /** Set by a notification (or a finished message) that arrived since the last claim began. */
  private wakePending = false;
  private wakeUp: (() => void) | undefined;
  /** Waiters for "a slot came free / everything finished". */
  private changed: (() => void)[] = [];
  private readonly unknownWarnedAt = new Map<string, number>();

  constructor(private readonly opts: WorkerOptions) {
    this.db = opts.db;
    this.config = opts.config;
    this.log = opts.logger;
    this.batchSize = opts.batchSize ?? opts.config.WORKER_BATCH_SIZE;
    this.concurrency = opts.concurrency ?? opts.config.WORKER_CONCURRENCY;
    const doneBatcher = new DoneBatcher(this.db);
    this.dispatchCtx = {
      db: this.db,
      markDone: (id, claimId, lastHandler) => doneBatcher.markDone(id, claimId, lastHandler),
      registry: opts.registry,
      log: this.log,
      events: this.events,
      signal: this.abortController.signal,
      maxAttempts: this.config.MAX_ATTEMPTS,
      backoff: {
        baseSeconds: this.config.BACKOFF_BASE_SECONDS,
        maxSeconds: this.config.BACKOFF_MAX_SECONDS,
        jitter: this.config.BACKOFF_JITTER,
        random: opts.random,
      },
      unknownTopicRecheckSeconds: this.config.UNKNOWN_TOPIC_RECHECK_SECONDS,
      onUnknownTopic: (topic) => this.warnUnknownTopic(topic),
    };
  }

  summary(): WorkerSummary {
    return { ...this.counts };
  }

  /** Once per topic per recheck period, not once per message per poll. */
  private warnUnknownTopic(topic: string) {
    const now = Date.now();
    const last = this.unknownWarnedAt.get(topic);
    if (last !== undefined && now - last < this.config.UNKNOWN_TOPIC_RECHECK_SECONDS * 1000) return;
    this.unknownWarnedAt.set(topic, now);
    this.log.warn(
      { topic, knownTopics: this.opts.registry.topics(), recheckSeconds: this.config.UNKNOWN_TOPIC_RECHECK_SECONDS },
      `no handler for outbox topic ${topic} (known: ${this.opts.registry.topics().join(', ') || 'none'}); leaving it PENDING`,
    );
  }

  // --- claiming and running -------------------------------------------------------------------

  /** Claims up to batchSize due messages into the local queue and starts as many as slots allow. */
  private claim(): Promise<number> {
    const run = async () => {
      const batch = await claimBatch(this.db, {
        limit: this.batchSize,
        leaseSeconds: this.config.LEASE_SECONDS,
        claimId: randomUUID(),
      });
      if (batch.length === 0) return 0;
      const now = Date.now();
      this.counts.claimed += batch.length;
      this.queue.push(...batch.map((m) => ({ ...m, claimedAtMs: now })));
      try {
        this.events.emit('claimed', { count: batch.length });
      } catch (err) {
        this.log.error({ err }, 'a claimed listener threw');
      }
      this.pump();
      return batch.length;
    };
    const p = run().finally(() => {
      if (this.claiming === p) this.claiming = undefined;
    });
    this.claiming = p;
    return p;
  }

  /** Starts queued messages while slots are free. Nothing new starts once stopping. */
  private pump() {
    while (!this.stopping && this.active.size < this.concurrency && this.queue.length > 0) {
      const msg = this.queue.shift()!;
      // Started this late, the lease may end mid-handler and another worker may run it too; give it
      // back instead (the claim is fenced, so this is harmless if someone already took it).
      if (Date.now() - msg.claimedAtMs > this.config.LEASE_SECONDS * 1000 - 1000) {
        void this.handBack([msg]);
        continue;
      }
      const p: Promise<void> = this.run(msg).finally(() => {
        this.active.delete(p);
        this.pump();
        this.notifyChanged();
        // A finished message may unblock the next message of its key: look again now.
        this.wake();
      });
      this.active.add(p);
    }
  }

  private async run(msg: Queued): Promise<void> {
    let outcome: MessageOutcome;
    const heartbeat = this.keepLeaseAlive(msg);
    try {
      outcome = await dispatch(this.dispatchCtx, msg);
    } catch (err) {
      // dispatch records failures itself; reaching here is a bug. The lease brings the message back.
      this.log.error({ err, messageId: msg.publicId }, 'dispatch failed unexpectedly');
      outcome = 'lost';
    } finally {
      clearInterval(heartbeat);
    }
    const key = ({ done: 'done', retry: 'retried', dead: 'dead', unknown_topic: 'unknownTopic', lost: 'lost' } as const)[outcome];
    this.counts[key]++;
  }

  /**
   * Extends the lease every third of LEASE_SECONDS while the message's handlers run, so a slow
   * handler (a sluggish SMTP server) is never run twice in parallel by another worker. A failed
   * extension is only logged: the fence on every settle still protects the outcome.
   */
  private keepLeaseAlive(msg: Queued): NodeJS.Timeout {
    const lease = this.config.LEASE_SECONDS;
    const timer = setInterval(() => {
      extendLease(this.db, msg.id, msg.claimId, lease).then(
        (held) => {
          if (!held) this.log.warn({ messageId: msg.publicId }, 'lease could not be extended: the claim was superseded');
        },
        (err) => this.log.warn({ messageId: msg.publicId, err: { message: (err as Error).message } }, 'lease extension failed'),
      );
    }, (lease * 1000) / 3);
    timer.unref();
    return timer;
  }

  private async handBack(msgs: Queued[]): Promise<void> {
    if (msgs.length === 0) return;
    try {
      const n = await handBack(this.db, msgs);
      this.counts.handedBack += n;
    } catch (err) {
      // The lease ends on its own; handing back only saves the wait.
      this.log.warn({ err: { message: (err as Error).message }, count: msgs.length }, 'could not hand back claimed messages');
      return;
    }
    for (const m of msgs) {
      const event = {
        messageId: m.publicId, topic: m.topic, handler: null, attempt: m.attempts, outcome: 'handed_back' as const, durationMs: 0,
      };
      this.log.info(event, 'outbox handler outcome');
      try {
        this.events.emit('outcome', event);
      } catch (err) {
        this.log.error({ err }, 'an outcome listener threw');
      }
    }
  }

  private notifyChanged() {
    const waiters = this.changed;
    this.changed = [];
    for (const w of waiters) w();
  }

  private nextChange(): Promise<void> {
    return new Promise((r) => this.changed.push(r));
  }

  /** Until nothing is queued or running (queued messages are handed back by stop()). */
  private async drained(): Promise<void> {
    while (this.active.size > 0 || (this.queue.length > 0 && !this.stopping)) await this.nextChange();
  }

  async runOnce(): Promise<number> {
    if (this.stopping) return 0;
    const n = await this.claim();
    await this.drained();
    return n;
  }

  /**
   * Whether to claim now. The next batch is claimed while the current one is still running (as
   * long as less than a batch waits locally), so the claim's round trip and commit overlap the
   * handlers and their DONE writes instead of adding to them. Prefetched messages wait at most a
   * batch's worth; one that waited too long for its lease is handed back, not started (pump).
   */
  private wantsMore(): boolean {
    return this.queue.length < this.batchSize && this.queue.length + this.active.size < this.batchSize + this.concurrency;
  }

  /**
   * Claims ahead (wantsMore) rather than after the whole batch finished (a batch waiting for its
   * slowest message would leave the other slots idle). When a claim finds
   * nothing, it waits for what is in flight, since a finished message may make the next message of
   * its key due, and claims once more: empty then means empty.
   */
  async runUntilEmpty(): Promise<number> {
    let total = 0;
    while (!this.stopping) {
      if (!this.wantsMore()) {
        await this.nextChange();
        continue;
      }
      const n = await this.claim();
      total += n;
      if (n > 0) continue;
      if (this.active.size === 0) break;
      await this.drained();
    }
    await this.drained();
    return total;
  }

  // --- long-running mode ----------------------------------------------------------------------

  private wake() {
    this.wakePending = true;
    this.wakeUp?.();
  }

  private sleep(ms: number): Promise<void> {
    if (this.wakePending || this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wakeUp = () => {
        this.wakeUp = undefined;
        done();
      };
    });
  }

  async start(): Promise<void> {
    if (this.loopPromise || this.stopping) return;
    if (this.opts.listen !== false) {
      this.listener = new OutboxListener(this.config.DATABASE_URL, OUTBOX_CHANNEL, () => this.wake(), this.log);
      await this.listener.start();
    }
    if (this.opts.purge !== false) {
      this.schedulePurge(0);
    }
    this.loopPromise = this.loop();
    this.log.info(
      { batchSize: this.batchSize, concurrency: this.concurrency, leaseSeconds: this.config.LEASE_SECONDS, topics: this.opts.registry.topics() },
      'outbox worker started',
    );
  }

  private async loop(): Promise<void> {
    let dbFailures = 0;
    while (!this.stopping) {
      if (!this.wantsMore()) {
        await this.nextChange();
        continue;
      }
      this.wakePending = false;
      let n: number;
      try {
        n = await this.claim();
        if (dbFailures > 0) this.log.info('database reachable again');
        dbFailures = 0;
      } catch (err) {
        // Database restarting, network blip, failover: never crash, back off and try again.
        dbFailures++;
        const delay = Math.min(250 * 2 ** (dbFailures - 1), 10_000);
        this.log.warn({ err: { message: (err as Error).message, code: (err as { code?: string }).code }, retryInMs: delay }, 'claim failed');
        this.wakePending = false;
        await this.sleep(delay);
        continue;
      }
      if (n === 0) await this.sleep(this.config.POLL_INTERVAL_MS);
    }
  }

  private schedulePurge(delayMs: number) {
    this.purgeTimer = setTimeout(() => {
      this.purging = this.purgeNow().finally(() => {
        this.purging = undefined;
        if (!this.stopping) this.schedulePurge(this.config.OUTBOX_PURGE_INTERVAL_SECONDS * 1000);
      });
    }, delayMs);
    this.purgeTimer.unref();
  }

  private async purgeNow(): Promise<void> {
    try {
      let total = 0;
      // Bounded batches, and it stops between two of them when the worker stops.
      while (!this.stopping) {
        const n = await purgeDone(this.db, { retentionDays: this.config.OUTBOX_RETENTION_DAYS, batchSize: 1000, maxBatches: 1 });
        total += n;
        if (n < 1000) break;
      }
      this.counts.purged += total;
      if (total > 0) this.log.info({ purged: total, retentionDays: this.config.OUTBOX_RETENTION_DAYS }, 'purged old DONE messages');
    } catch (err) {
      this.log.warn({ err: { message: (err as Error).message } }, 'purge failed; will try again next time');
    }
  }

  // --- stopping -------------------------------------------------------------------------------

  stop(): Promise<WorkerSummary> {
    return (this.stopPromise ??= this.doStop());
  }

  private async doStop(): Promise<WorkerSummary> {
    this.stopping = true;
    this.wake();
    this.notifyChanged();
    clearTimeout(this.purgeTimer);
    // A claim in progress completes; what it brought in is handed back below, not started.
    await this.loopPromise;
    await this.claiming?.catch(() => 0);
    await this.handBack(this.queue.splice(0));
    this.notifyChanged();
    while (this.active.size > 0) await Promise.allSettled([...this.active]);
    await this.purging;
    await this.listener?.close();
    const s = this.summary();
    return s;
  }

  abort(): void {
    this.abortController.abort(new Error('worker aborted'));
  }
}
