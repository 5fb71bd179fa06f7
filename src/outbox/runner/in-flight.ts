import type { ClaimedMessage } from '../claim.ts';
import type { HandBacks } from '../lease/hand-backs.ts';
import { StaleSweep } from '../lease/stale-sweep.ts';
import type { Heartbeat } from './heartbeat.ts';
import { mergeByPriority } from './local-queue.ts';

/**
 * Everything the worker has claimed and not yet settled, in one place: the local queue (claimed,
 * not started), the handler slots, the started messages the heartbeat holds, and the claimed
 * messages going back unstarted. The loop asks `idle` whether anything it holds could still make
 * a message due; a graceful stop asks it whether it may close.
 */
export class InFlight {
  /** Claimed, not started, in priority order (./local-queue.ts). */
  private queue: ClaimedMessage[] = [];
  /** Handlers running (a slot each). */
  private running = 0;
  /** Once stopping: nothing more starts; what is queued goes back (`handBackQueued`). */
  private starting = true;
  /** While the queue holds anything: hands back what waited too long to start. */
  private readonly staleSweep: StaleSweep;

  constructor(
    private readonly concurrency: number,
    /** Holds the started messages' leases until they are settled. */
    private readonly heartbeat: Heartbeat,
    private readonly handBacks: HandBacks<ClaimedMessage>,
    sweepEveryMs: number,
  ) {
    this.staleSweep = new StaleSweep(sweepEveryMs, () => this.handBackStale());
  }

  /** Claimed and waiting for a slot. */
  get queued(): number {
    return this.queue.length;
  }

  /** Started and not yet settled. */
  get held(): number {
    return this.heartbeat.size;
  }

  /** Nothing queued, nothing started and unsettled, nothing being handed back. */
  get idle(): boolean {
    return this.heartbeat.size === 0 && this.queue.length === 0 && this.handBacks.pending === 0;
  }

  /** Resolves once every hand-back queued so far is written (or failed). */
  get handedBack(): Promise<void> {
    return this.handBacks.settled;
  }

  /** A claimed batch joins the local queue, keeping the claim's priorities. */
  add(batch: ClaimedMessage[]): void {
    this.queue = this.queue.length === 0 ? batch : mergeByPriority(this.queue, batch);
  }

  /**
   * Starts queued messages while slots are free, until stopping: each takes a slot and its lease
   * is held, then `start` runs it. A message with less than half its lease left (it waited behind slow
   * handlers) is handed back instead: started that late, its lease could end mid-handler and
   * another worker could run it in parallel.
   */
  startWhileFree(now: number, start: (msg: ClaimedMessage) => void): void {
    let stale: ClaimedMessage[] | undefined;
    while (this.starting && this.running < this.concurrency && this.queue.length > 0) {
      const msg = this.queue.shift()!;
      if (!this.heartbeat.canStart(msg, now)) {
        (stale ??= []).push(msg);
        continue;
      }
      this.running++;
      this.heartbeat.hold(msg);
      start(msg);
    }
    if (stale) this.handBacks.later(stale);
  }

  /** The handlers of a started message are done: its slot is free, its lease still held. */
  freeSlot(): void {
    this.running--;
  }

  /** A started message's outcome is recorded: its lease is no longer held. */
  settled(msg: ClaimedMessage): void {
    this.heartbeat.release(msg);
  }

  /** Keeps the stale sweep ticking while anything is queued. */
  sweepWhileQueued(): void {
    if (this.queue.length > 0) this.staleSweep.ensure();
  }

  /** Stopping: nothing more starts. */
  stopStarting(): void {
    this.starting = false;
  }

  /** Stopping: everything still queued goes back unstarted. */
  handBackQueued(): void {
    const rest = this.queue;
    this.queue = [];
    this.staleSweep.stop();
    this.handBacks.later(rest);
  }

  /** Hands back the queued messages that can no longer start (src/outbox/lease/stale-sweep.ts); whether any still wait. */
  private handBackStale(): boolean {
    const now = Date.now();
    const keep: ClaimedMessage[] = [];
    const stale: ClaimedMessage[] = [];
    for (const m of this.queue) (this.heartbeat.canStart(m, now) ? keep : stale).push(m);
    if (stale.length === 0) return keep.length > 0;
    this.queue = keep;
    this.handBacks.later(stale);
    return keep.length > 0;
  }
}
