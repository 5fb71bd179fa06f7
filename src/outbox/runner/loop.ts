import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import type pg from 'pg';
import type { Logger } from '../../logger.ts';
import { backoffDelaySeconds } from '../backoff.ts';
import type { ClaimedMessage, NotifiedMessage } from '../claim.ts';
import { ClaimConnection } from '../claim-connection.ts';
import { PlannedConnection } from '../planned-connection.ts';
import { executorOf } from '../executor.ts';
import { extendLeases, handBack } from '../lease.ts';
import { HandBacks } from '../lease/hand-backs.ts';
import { Settler, type MessageOutcome } from '../settle.ts';
import { notifiedBy, OUTBOX_CHANNEL } from '../channel.ts';
import { ClaimSize } from './claim-size.ts';
import { dispatch, failureRules, type DispatchContext } from './dispatch.ts';
import { Heartbeat } from './heartbeat.ts';
import { Housekeeping } from './housekeeping.ts';
import { InFlight } from './in-flight.ts';
import { WalStream } from '../wal-stream.ts';
import { OutboxListener } from './listener.ts';
import type { WorkerEvents } from '../types.ts';
import { emptySummary, OutcomeReporter, ProgressLog, type WorkerSummary } from './outcomes.ts';
import type { WorkerOptions } from './options.ts';
import { handleInSpan, recordClaim, tracingOn } from './tracing.ts';
import { PollWalks } from './poll-walks.ts';
import { LoopWaits } from './waits.ts';

/**
 * The outbox worker, usable in-process (tests, other tools) and by the application's worker process.
 *
 *   const worker = createWorker({ db, registry, logger, ...settings });   // settings: ./options.ts
 *   await worker.runOnce();        // claim one batch, process it, return how many were claimed
 *   await worker.runUntilEmpty();  // until a claim finds nothing due; returns the total claimed
 *   await worker.start();          // run: LISTEN + fallback poll + housekeeping, until stop()
 *   await worker.stop();           // stop claiming, finish in-flight, hand back the rest
 *
 * One message's way, each step a file, each file once:
 *   claim (src/outbox/claim.ts: a batch per statement, into the local queue)
 *   → dispatch (./dispatch.ts: its handlers, when a slot is free and enough lease is left; returns a verdict)
 *   → settle (src/outbox/settle.ts: records the verdict, a deferral through src/outbox/lanes.ts; DONE batched)
 *   → the message is no longer held; the next message of its key may now be due.
 * The heartbeat (./heartbeat.ts) keeps what is held leased; outcome events and logs: ./outcomes.ts.
 */

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

const COUNT_KEY = {
  done: 'done',
  retry: 'retried',
  postpone: 'postponed',
  dead: 'dead',
  unknown_topic: 'unknownTopic',
  lost: 'lost',
} as const;

/** After a failed claim (database restarting, failover): 0.25 s, 0.5 s, … up to 10 s between tries. */
const CLAIM_FAILURE_BACKOFF = { baseSeconds: 0.25, maxSeconds: 10 };

class OutboxWorker implements Worker {
  /** The pool behind the application's database: the worker's own writes go there. */
  private readonly pool: pg.Pool;
  private readonly log: Logger;
  /** How many the next claim asks for: grows with a backlog (./claim-size.ts). */
  private readonly claimSize: ClaimSize;
  private readonly concurrency: number;
  private readonly abortController = new AbortController();
  private readonly reporter: OutcomeReporter;
  private readonly dispatchCtx: DispatchContext;
  private readonly settler: Settler;
  /** What is started and not yet settled, with its leases kept alive. */
  private readonly heartbeat: Heartbeat;
  /** The claim's own connection (src/outbox/claim-connection.ts says why). */
  private readonly claimer: ClaimConnection;
  /** The batched writes' own connection: DONE, lease extensions, hand-backs (src/outbox/planned-connection.ts says why). */
  private readonly settleConnection: PlannedConnection;
  /** runOnce/runUntilEmpty calls in progress outside start(): the last one closes the worker's own connections. */
  private standaloneRuns = 0;
  private readonly counts = emptySummary();
  /** The handlers that keep their own lane (src/outbox/lanes.ts), for the claim. */
  private readonly lanes: readonly string[];
  /** Claimed and not yet settled: the local queue, the slots, the hand-backs (./in-flight.ts). */
  private readonly inFlight: InFlight;
  /** The last claim got fewer messages than it asked for: it took everything due at its snapshot. */
  private tookAllDue = false;
  private stopping = false;
  private stopPromise: Promise<WorkerSummary> | undefined;
  private loopPromise: Promise<unknown> | undefined;
  private claiming: Promise<number> | undefined;
  private listener: OutboxListener | undefined;
  /** OUTBOX_WRITES=wal: the slot streamed into rows while the worker runs (src/outbox/wal-stream.ts). */
  private walStream: WalStream | undefined;
  private housekeeping: Housekeeping | undefined;
  private progress: ProgressLog | undefined;
  /** Wake-ups and waiters: a notification or a settled message, a slot come free (./waits.ts). */
  private readonly waits = new LoopWaits();
  /** The next claim takes these messages, which wake-ups named, instead of walking (untilDue). */
  private nextNotified: NotifiedMessage[] | null = null;
  /** When the last walk was sent: the poll walks at the latest a poll interval after it (untilDue). */
  private lastWalkAt = 0;
  /** Which walk the poll makes, both indexes or the first alone (./poll-walks.ts). */
  private readonly pollWalks: PollWalks;
  /** The next claim is the poll's walk of the first index alone (untilDue). */
  private agedOnly = false;
  private readonly unknownWarnedAt = new Map<string, number>();

  constructor(private readonly opts: WorkerOptions) {
    this.pool = executorOf(opts.db);
    this.log = opts.logger;
    this.claimSize = new ClaimSize(opts.batchSize, opts.maxBatchSize, opts.leaseSeconds);
    this.pollWalks = new PollWalks(opts.pollIntervalMs, opts.leaseSeconds);
    this.concurrency = opts.concurrency;
    this.reporter = new OutcomeReporter(this.log);
    this.settleConnection = new PlannedConnection(opts.db, { role: 'settle' });
    const settleOn = this.settleConnection;
    this.settler = new Settler(this.pool, settleOn, this.log, this.reporter, opts.unknownTopicRecheckSeconds, opts.logEachMessage);
    this.heartbeat = new Heartbeat(
      (claims, seconds) => settleOn.use((client) => extendLeases(client, claims, seconds)),
      this.log,
      opts.leaseSeconds,
    );
    this.claimer = opts.claimConnection ?? new ClaimConnection(opts.db, opts.walSlot === undefined ? {} : { walSlot: opts.walSlot });
    this.lanes = opts.registry.ownLanes();
    this.waits.maxNotified = this.claimSize.max;
    const handBacks = new HandBacks<ClaimedMessage>({
      write: (msgs) => settleOn.use((client) => handBack(client, msgs)),
      done: (msgs, n) => {
        this.counts.handedBack += n;
        this.reporter.handedBack(msgs);
      },
      failed: (err, msgs) => this.log.warn({ err, count: msgs.length }, 'could not hand back claimed messages'),
      finished: () => this.waits.changed(),
    });
    this.inFlight = new InFlight(this.concurrency, this.heartbeat, handBacks, (opts.leaseSeconds * 1000) / 4);
    this.dispatchCtx = {
      registry: opts.registry,
      payloadSchemas: opts.payloadSchemas ?? {},
      log: this.log,
      signal: this.abortController.signal,
      maxAttempts: opts.maxAttempts,
      backoff: { ...opts.backoff, random: opts.random },
      failureRules: failureRules(opts.failureRules),
      handlerDone: (msg, handler, durationMs) => this.settler.handlerDone(msg, handler, durationMs),
      deferToLanes: (msg, deferrals) => this.settler.deferToLanes(msg, deferrals),
    };
  }

  get events(): EventEmitter<WorkerEvents> {
    return this.reporter.events;
  }

  summary(): WorkerSummary {
    return { ...this.counts };
  }

  // --- one message: dispatch → settle ---------------------------------------------------------

  /** Starts queued messages while slots are free (InFlight.startWhileFree); nothing new once stopping. */
  private pump() {
    const now = Date.now();
    this.inFlight.startWhileFree(now, (msg) => {
      this.claimSize.started(msg.leaseUntilMs, now);
      void this.process(msg);
    });
  }

  /** One message from its slot to its recorded outcome. Never throws: dispatch and settle catch their own. */
  private async process(msg: ClaimedMessage): Promise<void> {
    const verdict = await (tracingOn() ? handleInSpan(msg, () => dispatch(this.dispatchCtx, msg)) : dispatch(this.dispatchCtx, msg));
    // The slot is free as soon as the handlers are: the next message starts while this one is written.
    this.inFlight.freeSlot();
    this.pump();
    this.waits.changed();
    if (verdict?.kind === 'unknown_topic') this.warnUnknownTopic(msg.topic);
    const outcome: MessageOutcome = await this.settler.settle(msg, verdict);
    this.inFlight.settled(msg);
    this.counts[COUNT_KEY[outcome]]++;
    this.waits.changed();
    // A settled message may make the next message of its key due: the idle loop looks (untilDue).
    this.waits.settled(msg.key);
  }

  /** Once per topic per recheck period, not once per message per poll. */
  private warnUnknownTopic(topic: string) {
    const now = Date.now();
    const last = this.unknownWarnedAt.get(topic);
    if (last !== undefined && now - last < this.opts.unknownTopicRecheckSeconds * 1000) return;
    this.unknownWarnedAt.set(topic, now);
    const known = this.opts.registry.topics();
    this.log.warn(
      { topic, knownTopics: known, recheckSeconds: this.opts.unknownTopicRecheckSeconds },
      `no handler for outbox topic ${topic} (known: ${known.join(', ') || 'none'}); leaving it PENDING`,
    );
  }

  // --- the loop: claim ahead while slots and the local queue allow ----------------------------

  /** Claims up to the claim size of due messages into the local queue and starts as many as slots allow. */
  private claim(): Promise<number> {
    const p = this.claimNow().finally(() => {
      if (this.claiming === p) this.claiming = undefined;
    });
    this.claiming = p;
    return p;
  }

  private async claimNow(): Promise<number> {
    const notified = this.nextNotified;
    this.nextNotified = null;
    const agedOnly = this.agedOnly;
    this.agedOnly = false;
    const limit = this.claimSize.next;
    const sentAt = Date.now();
    const opts = { limit, leaseSeconds: this.opts.leaseSeconds, claimId: randomUUID(), lanes: this.lanes };
    let batch: ClaimedMessage[];
    if (notified !== null) {
      // The messages the wake-ups named, by id: everything else due was taken by the walk before
      // (untilDue), so this one takes all that is due, and tells nothing of a backlog.
      batch = await this.claimer.claimIds(notified, opts);
      this.tookAllDue = true;
    } else {
      this.lastWalkAt = sentAt;
      if (agedOnly) {
        // The poll between full walks sees no first delivery: the wake-ups and settled keys since
        // the last full walk stay to be answered.
        batch = await this.claimer.claimAged(opts);
      } else {
        this.waits.claimBegins();
        batch = await this.claimer.claimBatch(opts);
        this.pollWalks.walked(sentAt, Date.now() - sentAt, batch.length);
      }
      this.tookAllDue = batch.length < limit;
      this.claimSize.claimed(limit, batch.length, this.inFlight.queued);
    }
    const n = batch.length;
    if (n === 0) return 0;
    if (tracingOn()) recordClaim(sentAt, batch, limit);
    this.counts.claimed += n;
    this.inFlight.add(batch);
    this.reporter.claimed(n);
    this.pump();
    this.inFlight.sweepWhileQueued();
    return n;
  }

  /**
   * Whether to claim now. The next batch is claimed while the current one is still running (as
   * long as less than a batch waits locally), so the claim's round trip overlaps the handlers and
   * their DONE writes instead of adding to them. A prefetched message that waited too long for its
   * lease is handed back, not started (pump).
   */
  private wantsMore(): boolean {
    const batch = this.claimSize.next;
    const { queued, held } = this.inFlight;
    return queued < batch && queued + held < 2 * batch + this.concurrency;
  }

  /**
   * The one loop, in two modes.
   * - 'until-empty': when a claim finds nothing, it waits for what is in flight (a settled message
   *   may make the next message of its key due) and claims once more: empty then means empty. A
   *   failed claim is the caller's error.
   * - 'forever' (start()): when a claim finds nothing, it sleeps until a notification or the poll
   *   interval; a failed claim (database restarting, failover) never crashes it: it backs off and
   *   tries again.
   */
  private async loop(mode: 'until-empty' | 'forever'): Promise<number> {
    let total = 0;
    let failures = 0;
    while (!this.stopping) {
      if (!this.wantsMore()) {
        await this.waits.nextChange();
        continue;
      }
      let n: number;
      try {
        n = await this.claim();
      } catch (err) {
        if (mode === 'until-empty') throw err;
        failures++;
        const retryInMs = backoffDelaySeconds(failures, CLAIM_FAILURE_BACKOFF) * 1000;
        this.log.warn({ err, retryInMs }, 'claim failed');
        this.waits.pending = false;
        this.nextNotified = null;
        await this.pause(retryInMs);
        continue;
      }
      if (failures > 0) this.log.info('database reachable again');
      failures = 0;
      total += n;
      // Running, a claim that took fewer than it asked for took everything due at its snapshot, so
      // the next one waits for a reason: a notification (one that arrived during the claim ends
      // the pause at once), a settled message, the poll. Claiming again at once would walk the
      // claim's indexes to find nothing, and under a snapshot held open every walk passes every
      // message finished since it began (ADR 0057).
      if (n > 0 && (mode === 'until-empty' || !this.tookAllDue)) continue;
      if (mode === 'forever') {
        await this.untilDue(this.opts.pollIntervalMs);
        continue;
      }
      // Empty means empty only when nothing we hold could still make a message due, and nothing
      // settled while the claim ran: its snapshot may predate that settle, and so have seen the
      // next message of the settled one's key as still held up by it.
      if (this.inFlight.idle && !this.waits.pending && !this.waits.settledAny) break;
      await this.drained();
    }
    if (mode === 'until-empty') await this.drained();
    return total;
  }

  async runOnce(): Promise<number> {
    if (this.stopping) return 0;
    return this.standalone(async () => {
      const n = await this.claim();
      await this.drained();
      return n;
    });
  }

  runUntilEmpty(): Promise<number> {
    return this.standalone(() => this.loop('until-empty'));
  }

  /** Outside start(), the worker's own connections are closed when the last run returns (nothing to stop()). */
  private async standalone<T>(work: () => Promise<T>): Promise<T> {
    this.standaloneRuns++;
    try {
      return await work();
    } finally {
      if (--this.standaloneRuns === 0 && !this.loopPromise) await this.closeConnections();
    }
  }

  async start(): Promise<void> {
    if (this.loopPromise || this.stopping) return;
    if (this.opts.listen !== false) {
      this.listener = new OutboxListener(
        this.opts.listenConnectionString,
        OUTBOX_CHANNEL,
        (payload) => this.waits.wake(notifiedBy(payload)),
        this.log,
      );
      await this.listener.start();
    }
    if (this.opts.walSlot !== undefined) {
      // Rows made as the messages commit, and their wake-up sent, so claims stop reading the slot.
      this.claimer.streamsWal();
      this.walStream = new WalStream({
        connectionString: this.opts.listenConnectionString,
        slot: this.opts.walSlot,
        pool: this.pool,
        logger: this.log,
      });
      this.walStream.start();
    }
    if (this.opts.housekeeping !== false) {
      this.housekeeping = new Housekeeping(this.opts.db, this.log, {
        retentionDays: this.opts.retentionDays,
        intervalSeconds: this.opts.housekeepingIntervalSeconds,
        chores: this.opts.chores,
        onPurged: (c) => (this.counts.purged += c.outbox),
      });
      this.housekeeping.start();
    }
    this.progress = new ProgressLog(this.log, () => this.summary());
    this.progress.start();
    // The running loop asks about settled keys before it claims for them (untilDue); drains do not.
    this.waits.keepKeys = true;
    this.loopPromise = this.loop('forever');
    this.log.info(
      {
        batchSize: this.claimSize.min,
        maxBatchSize: this.claimSize.max,
        concurrency: this.concurrency,
        leaseSeconds: this.opts.leaseSeconds,
        topics: this.opts.registry.topics(),
      },
      'outbox worker started',
    );
  }

  // --- waiting --------------------------------------------------------------------------------

  /** Sleeps `ms`, or less: a notification, a settled message or stop() ends it. */
  private pause(ms: number): Promise<void> {
    return this.stopping ? Promise.resolve() : this.waits.pause(ms);
  }

  /**
   * Idle after a claim that took everything due: sleeps up to `ms` (the poll), until a
   * notification, stop(), or a settled message whose key has a later message live: that one may be
   * due now. A settled message whose key has nothing behind it makes nothing due, and the claim it
   * used to start walked the claim's indexes to find nothing (ADR 0057); asking costs a probe of
   * outbox_key_idx per key. A failed probe claims: the claim has its own backoff.
   *
   * Woken only by notifications that each named their message (src/outbox/channel.ts), the next
   * claim takes those messages by id instead of walking (ADR 0058): nothing else can have become
   * due since the walk before, except by time (a backoff, a lease ending), which the poll's walk
   * takes. So the poll counts from the last walk, not from the last claim: a steady stream of
   * named messages must not put it off for good. Any other reason walks. The poll walks the first
   * index alone between full walks while full walks are dear (./poll-walks.ts, ADR 0059).
   */
  private async untilDue(ms: number): Promise<void> {
    const until = this.lastWalkAt + ms;
    for (;;) {
      await this.pause(until - Date.now());
      if (this.stopping) return;
      if (Date.now() >= until) {
        this.agedOnly = !this.waits.pending && !this.pollWalks.fullAt(Date.now());
        return;
      }
      if (this.waits.pending) {
        // Named messages first; the settled keys are kept, and asked about once they are claimed.
        this.nextNotified = this.waits.takeNotified(this.claimSize.next);
        return;
      }
      const keys = this.waits.takeSettledKeys();
      if (keys === null) return;
      if (keys.length === 0) continue;
      if (await this.claimer.laterOfKeys(keys).catch(() => true)) return;
    }
  }

  /** Until nothing is queued, running or being settled (queued messages are handed back by stop()). */
  private async drained(): Promise<void> {
    while (this.inFlight.held > 0 || (this.inFlight.queued > 0 && !this.stopping)) await this.waits.nextChange();
    await this.inFlight.handedBack;
  }

  // --- stopping -------------------------------------------------------------------------------

  stop(): Promise<WorkerSummary> {
    return (this.stopPromise ??= this.doStop());
  }

  private async doStop(): Promise<WorkerSummary> {
    this.stopping = true;
    this.inFlight.stopStarting();
    this.waits.wake();
    this.waits.changed();
    this.progress?.stop();
    const housekeeping = this.housekeeping?.stop();
    const walStream = this.walStream?.stop();
    // A claim in progress completes; what it brought in is handed back below, not started.
    await this.loopPromise;
    await this.claiming?.catch(() => 0);
    this.inFlight.handBackQueued();
    await this.inFlight.handedBack;
    this.waits.changed();
    // The queue is empty and every hand-back written: idle once the started messages are settled.
    while (!this.inFlight.idle) await this.waits.nextChange();
    await this.heartbeat.stop();
    await housekeeping;
    await walStream;
    await this.listener?.close();
    await this.closeConnections();
    return this.summary();
  }

  private async closeConnections(): Promise<void> {
    await this.claimer.close();
    await this.settleConnection.close();
  }

  abort(): void {
    this.abortController.abort(new Error('worker aborted'));
  }
}
