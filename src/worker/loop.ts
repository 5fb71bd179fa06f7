import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import type { Config } from '../config.ts';
import type { Db } from '../db/client.ts';
import type { Logger } from '../logger.ts';
import type { ClaimedMessage } from '../outbox/claim.ts';
import { ClaimConnection } from '../outbox/claim-connection.ts';
import { handBack } from '../outbox/lease.ts';
import { OUTBOX_CHANNEL } from '../outbox/topics.ts';
import { dispatch, type DispatchContext } from './dispatch.ts';
import { emptySummary, OutcomeReporter, ProgressLog, type WorkerEvents, type WorkerSummary } from './events.ts';
import { Heartbeat } from './heartbeat.ts';
import { Housekeeping } from './housekeeping.ts';
import { OutboxListener } from './listener.ts';
import type { HandlerRegistry } from './registry.ts';
import { Settler, type MessageOutcome } from './settler.ts';

export type { Outcome, OutcomeEvent, WorkerEvents, WorkerSummary } from './events.ts';

/**
 * The worker loop, usable in-process (tests, other tools) and by src/worker/drain-outbox.ts.
 *
 *   const worker = createWorker({ db, config, registry, logger });
 *   await worker.runOnce();        // claim one batch, process it, return how many were claimed
 *   await worker.runUntilEmpty();  // until a claim finds nothing due; returns the total claimed
 *   await worker.start();          // run: LISTEN + fallback poll + housekeeping, until stop()
 *   await worker.stop();           // stop claiming, finish in-flight, hand back the rest
 *
 * One message's way: claim (src/outbox/claim.ts, a batch per statement, into the local queue) →
 * dispatch (src/worker/dispatch.ts, its handlers, when a slot is free and enough lease is left) →
 * verdict (src/worker/verdict.ts) → settle (src/worker/settler.ts, DONE batched). The heartbeat
 * (src/worker/heartbeat.ts) keeps what is held leased; events and logs: src/worker/events.ts.
 */

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
  /** start() runs the housekeeping (old DONE rows, expired keys and sessions) every OUTBOX_PURGE_INTERVAL_SECONDS (default true). */
  purge?: boolean;
  /** For the backoff jitter; Math.random otherwise. */
  random?: () => number;
  /** Where claims are sent (default: a ClaimConnection beside `db`'s pool). The worker closes it when it stops. */
  claimConnection?: ClaimConnection;
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

export function createWorker(opts: WorkerOptions): Worker {
  return new OutboxWorker(opts);
}

const COUNT_KEY = { done: 'done', retry: 'retried', dead: 'dead', unknown_topic: 'unknownTopic', lost: 'lost' } as const;

class OutboxWorker implements Worker {
  private readonly db: Db;
  private readonly config: Config;
  private readonly log: Logger;
  private readonly batchSize: number;
  private readonly concurrency: number;
  private readonly abortController = new AbortController();
  private readonly reporter: OutcomeReporter;
  private readonly dispatchCtx: DispatchContext;
  private readonly settler: Settler;
  private readonly heartbeat: Heartbeat;
  /** The claim's own connection (src/outbox/claim-connection.ts says why). */
  private readonly claimer: ClaimConnection;
  /** runOnce/runUntilEmpty calls in progress outside start(): the last one closes the claim connection. */
  private standaloneRuns = 0;
  private readonly counts = emptySummary();

  /** Claimed, not started. */
  private queue: ClaimedMessage[] = [];
  /** Started and not yet settled (handlers running, or their outcome being written): leased by the heartbeat. */
  private readonly held = new Set<ClaimedMessage>();
  /** Handlers running (a slot each). */
  private running = 0;
  private stopping = false;
  private stopPromise: Promise<WorkerSummary> | undefined;
  private loopPromise: Promise<void> | undefined;
  private claiming: Promise<number> | undefined;
  private listener: OutboxListener | undefined;
  private housekeeping: Housekeeping | undefined;
  private progress: ProgressLog | undefined;
  private handingBack: Promise<void> = Promise.resolve();
  private handBacksPending = 0;
  /** Set by a notification (or a settled message) that arrived since the last claim began. */
  private wakePending = false;
  private wakeUp: (() => void) | undefined;
  /** Waiters for "a slot came free / something settled". */
  private changed: (() => void)[] = [];
  private readonly unknownWarnedAt = new Map<string, number>();

  constructor(private readonly opts: WorkerOptions) {
    this.db = opts.db;
    this.config = opts.config;
    this.log = opts.logger;
    this.batchSize = opts.batchSize ?? opts.config.WORKER_BATCH_SIZE;
    this.concurrency = opts.concurrency ?? opts.config.WORKER_CONCURRENCY;
    this.reporter = new OutcomeReporter(this.log);
    this.settler = new Settler(this.db, this.log, this.reporter, this.config.UNKNOWN_TOPIC_RECHECK_SECONDS, this.onSettled);
    this.heartbeat = new Heartbeat(this.db, this.log, this.config.LEASE_SECONDS, this.held);
    this.claimer = opts.claimConnection ?? new ClaimConnection(this.db);
    this.dispatchCtx = {
      db: this.db,
      registry: opts.registry,
      log: this.log,
      reporter: this.reporter,
      signal: this.abortController.signal,
      maxAttempts: this.config.MAX_ATTEMPTS,
      backoff: {
        baseSeconds: this.config.BACKOFF_BASE_SECONDS,
        maxSeconds: this.config.BACKOFF_MAX_SECONDS,
        jitter: this.config.BACKOFF_JITTER,
        random: opts.random,
      },
      onUnknownTopic: (topic) => this.warnUnknownTopic(topic),
      settle: this.onDispatched,
    };
  }

  get events(): EventEmitter<WorkerEvents> {
    return this.reporter.events;
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

  // --- claim → dispatch → settle --------------------------------------------------------------

  /** Claims up to batchSize due messages into the local queue and starts as many as slots allow. */
  private claim(): Promise<number> {
    const p = this.claimNow().finally(() => {
      if (this.claiming === p) this.claiming = undefined;
    });
    this.claiming = p;
    return p;
  }

  private async claimNow(): Promise<number> {
    const batch = await this.claimer.claimBatch({
      limit: this.batchSize,
      leaseSeconds: this.config.LEASE_SECONDS,
      claimId: randomUUID(),
    });
    const n = batch.length;
    if (n === 0) return 0;
    this.counts.claimed += n;
    if (this.queue.length === 0) this.queue = batch;
    else for (const m of batch) this.queue.push(m);
    this.reporter.claimed(n);
    this.pump();
    return n;
  }

  /**
   * Starts queued messages while slots are free. Nothing new starts once stopping. A message with
   * less than half its lease left (it waited behind slow handlers) is handed back instead: started
   * that late, its lease could end mid-handler and another worker could run it in parallel.
   */
  private pump() {
    let stale: ClaimedMessage[] | undefined;
    const now = Date.now();
    while (!this.stopping && this.running < this.concurrency && this.queue.length > 0) {
      const msg = this.queue.shift()!;
      if (!this.heartbeat.canStart(msg, now)) {
        (stale ??= []).push(msg);
        continue;
      }
      this.running++;
      this.held.add(msg);
      void dispatch(this.dispatchCtx, msg);
    }
    if (this.held.size > 0) this.heartbeat.ensureRunning();
    if (stale) this.handBackLater(stale);
  }

  /** dispatch → here: the slot is free at once; the verdict goes to the settler. */
  private readonly onDispatched = (msg: ClaimedMessage, verdict: Parameters<DispatchContext['settle']>[1]): void => {
    this.running--;
    this.settler.settle(msg, verdict);
    this.pump();
    this.notifyChanged();
  };

  /** settler → here: the outcome is recorded (or given up on); the message is no longer ours. */
  private readonly onSettled = (msg: ClaimedMessage, outcome: MessageOutcome): void => {
    this.held.delete(msg);
    this.counts[COUNT_KEY[outcome]]++;
    this.heartbeat.maybeStop();
    this.notifyChanged();
    // A settled message may make the next message of its key due: look again.
    this.wake();
  };

  private handBackLater(msgs: ClaimedMessage[]) {
    this.handBacksPending++;
    this.handingBack = this.handingBack.then(() => this.handBack(msgs)).finally(() => {
      this.handBacksPending--;
      this.notifyChanged();
    });
  }

  private async handBack(msgs: ClaimedMessage[]): Promise<void> {
    if (msgs.length === 0) return;
    try {
      const n = await handBack(this.db, msgs);
      this.counts.handedBack += n;
    } catch (err) {
      // The lease ends on its own; handing back only saves the wait.
      this.log.warn({ err: { message: (err as Error).message }, count: msgs.length }, 'could not hand back claimed messages');
      return;
    }
    if (!this.reporter.wants('handed_back')) return;
    for (const m of msgs) {
      this.reporter.outcome({ messageId: m.publicId, topic: m.topic, handler: null, attempt: m.attempts, outcome: 'handed_back', durationMs: 0 });
    }
  }

  private notifyChanged() {
    if (this.changed.length === 0) return;
    const waiters = this.changed;
    this.changed = [];
    for (const w of waiters) w();
  }

  private nextChange(): Promise<void> {
    return new Promise((r) => this.changed.push(r));
  }

  /** Until nothing is queued, running or being settled (queued messages are handed back by stop()). */
  private async drained(): Promise<void> {
    while (this.held.size > 0 || (this.queue.length > 0 && !this.stopping)) await this.nextChange();
    await this.handingBack;
  }

  async runOnce(): Promise<number> {
    if (this.stopping) return 0;
    return this.standalone(async () => {
      const n = await this.claim();
      await this.drained();
      return n;
    });
  }

  /** Outside start(), the claim connection is closed when the last run returns (nothing to stop()). */
  private async standalone<T>(work: () => Promise<T>): Promise<T> {
    this.standaloneRuns++;
    try {
      return await work();
    } finally {
      if (--this.standaloneRuns === 0 && !this.loopPromise) await this.claimer.close();
    }
  }

  /**
   * Whether to claim now. The next batch is claimed while the current one is still running (as
   * long as less than a batch waits locally), so the claim's round trip overlaps the handlers and
   * their DONE writes instead of adding to them. A prefetched message that waited too long for its
   * lease is handed back, not started (pump).
   */
  private wantsMore(): boolean {
    return this.queue.length < this.batchSize && this.queue.length + this.held.size < 2 * this.batchSize + this.concurrency;
  }

  /**
   * Claims ahead (wantsMore) rather than after the whole batch finished. When a claim finds
   * nothing, it waits for what is in flight, since a settled message may make the next message of
   * its key due, and claims once more: empty then means empty.
   */
  runUntilEmpty(): Promise<number> {
    return this.standalone(() => this.untilEmpty());
  }

  private async untilEmpty(): Promise<number> {
    let total = 0;
    while (!this.stopping) {
      if (!this.wantsMore()) {
        await this.nextChange();
        continue;
      }
      const n = await this.claim();
      total += n;
      if (n > 0) continue;
      // Empty means empty only when nothing we hold could still make a message due.
      if (this.held.size === 0 && this.queue.length === 0 && this.handBacksPending === 0) break;
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
      this.housekeeping = new Housekeeping(this.db, this.log, {
        retentionDays: this.config.OUTBOX_RETENTION_DAYS,
        intervalSeconds: this.config.OUTBOX_PURGE_INTERVAL_SECONDS,
        onPurged: (c) => (this.counts.purged += c.outbox),
      });
      this.housekeeping.start();
    }
    this.progress = new ProgressLog(this.log, () => this.summary());
    this.progress.start();
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

  // --- stopping -------------------------------------------------------------------------------

  stop(): Promise<WorkerSummary> {
    return (this.stopPromise ??= this.doStop());
  }

  private async doStop(): Promise<WorkerSummary> {
    this.stopping = true;
    this.wake();
    this.notifyChanged();
    this.progress?.stop();
    const housekeeping = this.housekeeping?.stop();
    // A claim in progress completes; what it brought in is handed back below, not started.
    await this.loopPromise;
    await this.claiming?.catch(() => 0);
    const rest = this.queue;
    this.queue = [];
    this.handBackLater(rest);
    await this.handingBack;
    this.notifyChanged();
    while (this.held.size > 0) await this.nextChange();
    await this.settler.settled();
    await this.heartbeat.stop();
    await housekeeping;
    await this.listener?.close();
    await this.claimer.close();
    return this.summary();
  }

  abort(): void {
    this.abortController.abort(new Error('worker aborted'));
  }
}
