import type pg from 'pg';
import type { Config } from '../../config.ts';
import type { AttemptDone } from './attempt.ts';
import { HandBacks, StaleSweep } from '../../outbox/index.ts';
import { claimDeliveries, handBackDeliveries, type ClaimedDelivery } from './claim.ts';
import { LocalQueue, type SlotStats } from './local-queue.ts';
import type { OutageLog } from './outage-log.ts';

/*
 * What may be held claimed, in multiples of the in-flight caps (measured at 2, 4 and 8:
 * docs/adr/0036-webhook-keep-alive-per-checked-address.md). An endpoint: the round in flight and
 * one more, so an endpoint that hangs holds one round of deliveries waiting behind its slots, and
 * that round starts before its lease runs short. A host and the sender: 8, so that a host's several
 * endpoints each hold their next round, and a claim brings tens of deliveries instead of the few
 * that freed while the previous one ran. Other hosts keep their share as before: the claim takes
 * turns between hosts, and a host's queued deliveries start only in its own slots.
 */
export const CLAIM_AHEAD = { endpoint: 2, host: 8 } as const;

type SlotsConfig = Pick<
  Config,
  | 'WEBHOOK_CONCURRENCY'
  | 'WEBHOOK_ENDPOINT_CONCURRENCY'
  | 'WEBHOOK_HOST_CONCURRENCY'
  | 'WEBHOOK_IDLE_OWNER_SLOTS'
  | 'WEBHOOK_TIMEOUT_MS'
  | 'WEBHOOK_CONNECT_TIMEOUT_MS'
>;

type Attempt = (d: ClaimedDelivery, release: () => void) => Promise<AttemptDone>;

/** Resolves at the next slot freed or attempt finished (runUntilIdle waits on it). */
function changeSignal() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * The sender's slots, its local queue, and the claim that fills it (sender.ts drives them): the
 * claim queues, a freed slot starts the next queued delivery at once, and what is never started
 * (the sender stops, its endpoint was disabled, its lease ran short) goes back to the table.
 */
export class SenderSlots {
  /** Attempts started and not yet recorded. */
  readonly running = new Set<Promise<void>>();
  private readonly queue: LocalQueue;
  /** A queued delivery may wait for a slot as long as one attempt takes (the round ahead of it). */
  private readonly attemptMs: number;
  /**
   * The claim's lease: that wait, the attempt's own time limits, and 30 s to record it. A worker
   * killed mid-attempt leaves the delivery to be claimed again after this, and sent again with
   * the same webhook-id.
   */
  private readonly leaseSeconds: number;
  private closed = false;
  /** What is given back goes through the lease core's hand-backs, one batch after another. */
  private readonly handBacks: HandBacks<ClaimedDelivery>;
  /** While anything is queued: gives back, each second, what waited past its start deadline. */
  private readonly staleSweep: StaleSweep;
  private change = changeSignal();
  /** Wakes startReady when a rated endpoint's next start time comes (nothing else would). */
  private paceTimer: NodeJS.Timeout | undefined;
  private paceAt = Infinity;

  constructor(
    private readonly deps: { pool: pg.Pool; config: SlotsConfig; outage: OutageLog },
    private readonly attempt: Attempt,
    /** Called when a slot frees: the claim loop claims again. */
    private readonly onFree: () => void,
  ) {
    const { config } = deps;
    this.queue = new LocalQueue({
      slots: config.WEBHOOK_CONCURRENCY,
      perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY,
      perHost: config.WEBHOOK_HOST_CONCURRENCY,
      claimAhead: CLAIM_AHEAD.host,
      idleOwnerSlots: config.WEBHOOK_IDLE_OWNER_SLOTS,
    });
    this.attemptMs = config.WEBHOOK_TIMEOUT_MS + config.WEBHOOK_CONNECT_TIMEOUT_MS;
    this.leaseSeconds = Math.ceil((2 * this.attemptMs) / 1000) + 30;
    this.handBacks = new HandBacks({
      write: (list) => handBackDeliveries(deps.pool, list),
      failed: (err, list) =>
        deps.outage.failed(err, 'give back', 'claimed webhook deliveries could not be given back; their lease will', {
          deliveries: list.length,
        }),
      // Given back, it may be due at once: a sender waiting for a change claims again.
      finished: () => this.signalChange(),
    });
    this.staleSweep = new StaleSweep(1000, () => {
      this.handBacks.later(this.queue.expired(performance.now()));
      return this.queue.queued > 0;
    });
  }

  /** Something is in flight, being recorded, queued, or being given back. */
  busy(): boolean {
    return this.running.size > 0 || this.queue.queued > 0 || this.handBacks.pending > 0;
  }

  /** Room for a claim: slots free, or what comes after them not queued yet, or a quiet owner's first delivery. */
  canClaim(): boolean {
    return !this.closed && (this.queue.claimRoom() > 0 || this.queue.newcomerRoom() > 0);
  }

  /** Who holds the slots (the worker's metrics). */
  stats(): SlotStats {
    return this.queue.stats();
  }

  nextChange(): Promise<void> {
    return this.change.promise;
  }

  /** One claim for the room there is; starts what may start; returns how many deliveries it claimed. */
  async claimOnce(): Promise<number> {
    this.startReady();
    // The claim-ahead room spent by others' backlogs: still claim the first delivery of owners
    // holding nothing here, for the slots kept for them.
    const room = this.queue.claimRoom();
    const newcomersOnly = room <= 0;
    const limit = newcomersOnly ? this.queue.newcomerRoom() : room;
    if (this.closed || limit <= 0) return 0;
    const { config, pool } = this.deps;
    const claimedAt = performance.now();
    const claimed = await claimDeliveries(pool, {
      limit,
      perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY * CLAIM_AHEAD.endpoint,
      perHost: config.WEBHOOK_HOST_CONCURRENCY * CLAIM_AHEAD.host,
      claimed: this.queue.claimedByEndpoint,
      hostClaimed: this.queue.claimedByHost,
      leaseSeconds: this.leaseSeconds,
      newcomersOnly,
    });
    if (this.closed) {
      this.handBacks.later(claimed);
      await this.handBacks.settled;
      return 0;
    }
    // A rated endpoint's start times count from when the claim's answer is here: never earlier
    // than the schedule the database holds, whatever this process's clock.
    const answeredAt = performance.now();
    this.queue.add(
      claimed.map((d) => {
        if (!d.rate) return { d, startBy: claimedAt + this.attemptMs };
        const notBefore = answeredAt + (d.startInMs ?? 0);
        return { d, notBefore, gapMs: 1000 / d.rate, startBy: notBefore + this.attemptMs };
      }),
    );
    this.startReady();
    return claimed.length;
  }

  /** Starts nothing more from the queue and gives what it holds back to the table. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.paceTimer);
    this.staleSweep.stop();
    this.handBacks.later(this.queue.remove(() => true));
    await this.handBacks.settled;
  }

  /** Starts what may start: free slots, endpoint and host below their caps, records not too far behind. */
  private startReady(): void {
    if (this.closed || this.queue.queued === 0) return;
    const now = performance.now();
    this.staleSweep.ensure();
    // At most 2 × WEBHOOK_CONCURRENCY attempts started and not yet recorded.
    while (this.running.size < 2 * this.deps.config.WEBHOOK_CONCURRENCY) {
      const d = this.queue.next(now);
      if (!d) break;
      this.launch(d);
    }
    this.pace(now);
  }

  /** Sets the timer for the next start time still ahead, unless one already fires by then. */
  private pace(now: number): void {
    const at = this.queue.nextStartAt(now);
    if (at === undefined || at >= this.paceAt) return;
    clearTimeout(this.paceTimer);
    this.paceAt = at;
    this.paceTimer = setTimeout(
      () => {
        this.paceAt = Infinity;
        this.startReady();
      },
      Math.max(1, Math.ceil(at - now)),
    );
  }

  private launch(d: ClaimedDelivery): void {
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.queue.release(d);
      this.startReady();
      this.signalChange();
    };
    const p = this.attempt(d, release)
      .then((done) => {
        // Nothing more of an endpoint its own answer disabled: its queued deliveries go back
        // (before `release` below could start one).
        if (done.disabled) this.handBacks.later(this.queue.remove((q) => q.d.endpointId === d.endpointId));
      })
      .catch((err: unknown) => {
        this.deps.outage.failed(err, 'record', 'webhook attempt could not be recorded; its lease will bring it back', {
          delivery: d.publicId,
        });
      })
      .finally(() => {
        release();
        this.running.delete(p);
        this.signalChange();
      });
    this.running.add(p);
  }

  private signalChange(): void {
    this.change.resolve();
    this.change = changeSignal();
    this.onFree();
  }
}
