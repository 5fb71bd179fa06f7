import { setTimeout as sleep } from 'node:timers/promises';
import { EVENT_FAULT_KINDS, KINDS, type FaultKind } from '../fault-kinds.ts';
import { HOLDS_MAIL_UP, PACE_BESIDE_MS } from '../rules/email-pace.ts';
import { CARRY_OUT } from './carry-out.ts';
import type { InjectedFault, InjectorDeps, PlannedFault } from './types.ts';

/*
 * The injector: carries the fault schedule (plan.ts) out against the running processes, each
 * kind as its module says (carry-out.ts). Faults on different targets may overlap (a worker may be killed while Postgres
 * restarts; real outages do not take turns either), but never two on one target: a second kill of
 * a process that is already down kills nothing and cuts the first outage short. A fault due while
 * its target is still under another one waits for it.
 *
 * A fault counts only with evidence of its effect, observed by the injector: the killed pid's exit
 * (by the signal sent), more than zero backends that actually ended, a postmaster start time that
 * changed, a nats-server whose exit was seen and whose port refused connections. One without (a
 * kill with nothing running, no connection to terminate) is recorded with `evidence: null`,
 * reported, and not counted (rules/run.ts, somethingToJudge).
 *
 * The workers' two downstreams, the SMTP server and nats-server, are also never down close
 * together: an outage of one waits until the other has been back for `downstreamGapMs`. A message
 * whose email and relay handlers fail through both outages back to back would spend two outages'
 * worth of attempts; the retry window is sized for one (settings.ts), and a gap longer than the longest
 * backoff gives every message an attempt between the two. That is a turn taken when the outage is
 * ready to start, not a queue: an SMTP outage never waits for a NATS outage that is itself still
 * waiting for its target (a node kill catching up), or the SMTP outages due meanwhile would pile up
 * behind it and then come back to back, each a gap apart, and spend a message's attempts together.
 *
 * An isolated NATS outage (plan.ts marks some) is kept apart from every fault that holds mail up by
 * itself (rules/email-pace.ts HOLDS_MAIL_UP, and the other NATS outages): from QUIET_MS before it
 * is due until QUIET_MS after it ends, such a fault waits, then goes as if due then; and the outage
 * itself starts only once none has been in progress for QUIET_MS (one queued before the quiet
 * began, behind a busy target, may still have started inside it). The email pace
 * compares the mail answered during the outage with the mail answered beside it; with nothing else
 * happening in that stretch, a slower pace during it is the outage's.
 *
 * A stream deletion starts only once every NATS node fault of the plan has ended. plan.ts draws
 * the node faults before the deletions (nats-server 2.9.10 mishandles a node restarted after a
 * stream deletion: docs/events.md), but a node fault held back by a quiet, or waiting for its
 * target, could start after them: seed 20261207 killed nodes 90 s after the last deletion, and
 * the defect then took the earnings group's events away. The deletion waits outside every lane,
 * so the node faults queued behind it in the events path's lane never wait for it in turn.
 */

/**
 * Waits until `ms` have passed by Date.now(), the clock the faults' times are recorded in. A timer
 * alone can fire a millisecond early by that clock (it counts from the event loop's cached time),
 * which once left two downstream outages 149 ms apart under a 150 ms gap.
 */
async function pauseAtLeast(ms: number): Promise<void> {
  const until = Date.now() + ms;
  for (let left = ms; left > 0; left = until - Date.now()) await sleep(left);
}

/** What a fault hits: a worker kill its worker, every other kind the target of its kind. */
const faultTarget = (f: PlannedFault): string => (f.kind === 'worker-kill' ? `worker-${f.worker ?? 0}` : KINDS[f.kind].target);

/** The workers' downstreams: their outages are kept apart (downstreamGapMs). */
const DOWNSTREAM_OUTAGES = new Set<FaultKind>(['smtp-outage', 'nats-outage']);

/**
 * The earnings consumer needs nats-server to start: a consumer kill during a NATS outage found the
 * restarted consumer gone already (it refuses to start without NATS), so the kill had no effect and
 * the run fell short of its minimum. A stream deletion needs both up to be seen recreated (the
 * relay on its next publish, the consumer's durable); a forged event needs NATS to take it and
 * the consumer to refuse it before a deletion takes it away. They all take turns in this lane
 * (besides their own targets).
 */
const EVENTS_PATH_FAULTS = new Set<FaultKind>(EVENT_FAULT_KINDS);
const EVENTS_PATH = 'events path (consumer, NATS)';

/** How long before an isolated NATS outage and after its end nothing that holds mail up starts. */
export const QUIET_MS = PACE_BESIDE_MS + 5_000;

const NODE_FAULTS = new Set<FaultKind>(['nats-node-kill', 'nats-node-wipe']);

/** Whether a fault waits out the quiet around an isolated NATS outage. */
const holdsMailUp = (f: PlannedFault) => !f.isolated && (f.kind === 'nats-outage' || HOLDS_MAIL_UP[f.kind] !== undefined);

export class FaultInjector {
  readonly done: InjectedFault[] = [];
  private running = new Set<Promise<void>>();
  private timers: NodeJS.Timeout[] = [];
  /** Per target, the fault in progress (or queued last): the next one starts after it. */
  private busy = new Map<string, Promise<unknown>>();
  /** Resolves when no isolated outage's quiet is on; and the ends of the quiets on now. */
  private quiet: Promise<unknown> = Promise.resolve();
  private quietEnds = new Map<PlannedFault, () => void>();
  /** When the quiets on now began (ms epoch). */
  private quietSince: number | undefined;
  /** Faults that hold mail up, in progress now; and when the last one ended (ms epoch). */
  private holdingMail = 0;
  private lastHeldMailEnd = 0;
  /** Downstream outages in progress (one at most); and when the last one ended (ms epoch). */
  private downstreamDown = 0;
  private lastDownstreamEnd = 0;
  /** Node faults of the plan not ended yet, and those whose time has not come; over when none is left. */
  private nodeFaultsLeft = 0;
  private nodeFaultsNotDue = 0;
  private nodeFaultsOver: Promise<void> = Promise.resolve();
  private allNodeFaultsEnded = () => {};

  constructor(private readonly d: InjectorDeps) {}

  private get quietMs() {
    return this.d.quietMs ?? QUIET_MS;
  }

  /** Schedules every fault relative to now. */
  start(plan: PlannedFault[]) {
    this.nodeFaultsLeft = this.nodeFaultsNotDue = plan.filter((f) => NODE_FAULTS.has(f.kind)).length;
    if (this.nodeFaultsLeft > 0) this.nodeFaultsOver = new Promise((resolve) => (this.allNodeFaultsEnded = resolve));
    for (const f of plan) {
      if (f.isolated) this.timers.push(setTimeout(() => this.beginQuiet(f), Math.max(0, f.at - this.quietMs)));
      this.timers.push(
        setTimeout(() => {
          if (NODE_FAULTS.has(f.kind)) this.nodeFaultsNotDue--;
          if (!holdsMailUp(f)) return this.schedule(f);
          // Not in any lane while it waits: the isolated outage must never queue behind it. As far
          // after the quiet as it was due into it: the faults held keep their spacing.
          const late = this.quietSince === undefined ? 0 : Date.now() - this.quietSince;
          const held: Promise<void> = this.quiet
            .then(() => pauseAtLeast(late))
            .then(() => this.schedule(f))
            .finally(() => this.running.delete(held));
          this.running.add(held);
        }, f.at),
      );
    }
  }

  /** Queues `f` behind what its target (and its lane) have in progress; its wait counted from `due`. */
  private schedule(f: PlannedFault, due = Date.now()) {
    if (f.kind === 'stream-delete' && this.nodeFaultsLeft > 0) {
      const held: Promise<void> = this.nodeFaultsOver.then(() => this.schedule(f, due)).finally(() => this.running.delete(held));
      this.running.add(held);
      return;
    }
    const target = faultTarget(f);
    const eventsPath = EVENTS_PATH_FAULTS.has(f.kind);
    const before = Promise.all([this.busy.get(target), eventsPath ? this.busy.get(EVENTS_PATH) : undefined]);
    const p: Promise<void> = before
      .then(() => (f.isolated ? this.untilQuiet() : undefined))
      .then(() => (DOWNSTREAM_OUTAGES.has(f.kind) ? this.downstreamTurn() : undefined))
      .then(() => this.inject(f, target, Date.now() - due))
      .catch((err) => this.d.log(`fault ${f.kind} failed: ${String(err)}`))
      .finally(() => {
        this.running.delete(p);
        if (NODE_FAULTS.has(f.kind) && --this.nodeFaultsLeft === 0) this.allNodeFaultsEnded();
        // The quiet lasts QUIET_MS past the isolated outage's end, however it ended.
        const end = this.quietEnds.get(f);
        if (end) void pauseAtLeast(this.quietMs).then(end);
      });
    this.busy.set(target, p);
    if (eventsPath) this.busy.set(EVENTS_PATH, p);
    this.running.add(p);
  }

  /**
   * Until no fault that holds mail up has been in progress for the quiet's length. Those already
   * queued when the quiet began (behind a busy target) still go, and may start inside it: the
   * isolated outage waits until QUIET_MS after the last of them ended.
   */
  private async untilQuiet(): Promise<void> {
    for (;;) {
      const left = this.holdingMail > 0 ? this.quietMs : this.lastHeldMailEnd + this.quietMs - Date.now();
      if (left <= 0) return;
      await sleep(Math.min(left, 100));
    }
  }

  /**
   * Until no downstream outage is in progress and the last one has been over for the gap; then
   * takes the turn (counted before anything else can look, so two waiting never both start).
   */
  private async downstreamTurn(): Promise<void> {
    for (;;) {
      const left = this.downstreamDown > 0 ? 50 : this.lastDownstreamEnd + (this.d.downstreamGapMs ?? 0) - Date.now();
      if (left <= 0) {
        this.downstreamDown++;
        return;
      }
      await sleep(Math.min(left, 50));
    }
  }

  private beginQuiet(f: PlannedFault) {
    if (this.quietEnds.size === 0) this.quietSince = Date.now();
    const ended = new Promise<void>((resolve) =>
      this.quietEnds.set(f, () => {
        this.quietEnds.delete(f);
        if (this.quietEnds.size === 0) this.quietSince = undefined;
        resolve();
      }),
    );
    this.quiet = Promise.all([this.quiet, ended]);
  }

  /** Waits for the faults in progress or queued (and cancels any not yet due). */
  async settle(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    // Node faults cancelled before they were due never end: a deletion waiting for them goes now.
    this.nodeFaultsLeft -= this.nodeFaultsNotDue;
    this.nodeFaultsNotDue = 0;
    if (this.nodeFaultsLeft <= 0) this.allNodeFaultsEnded();
    // An isolated outage cancelled before it was due ends its quiet now: what waits for it goes.
    for (const [f, end] of [...this.quietEnds]) if (!this.done.some((d) => d.kind === f.kind && d.at === f.at)) end();
    while (this.running.size) await Promise.all([...this.running]);
  }

  get lastFaultEndedAt(): number | undefined {
    return this.done.length ? Math.max(...this.done.map((f) => f.endedAt)) : undefined;
  }

  private async inject(f: PlannedFault, target: string, waitedMs: number): Promise<void> {
    const startedAt = Date.now();
    const holds = holdsMailUp(f);
    if (holds) this.holdingMail++;
    // One end time for the fault's record and for the gap and the quiet counted from it: read twice,
    // the clock once moved a millisecond between, and a gap of 150 ms measured 149 in the record.
    let endedAt = startedAt;
    const { detail, evidence } = await CARRY_OUT[f.kind](f, this.d).finally(() => {
      endedAt = Date.now();
      // Its turn was taken in downstreamTurn().
      if (DOWNSTREAM_OUTAGES.has(f.kind)) {
        this.downstreamDown--;
        this.lastDownstreamEnd = endedAt;
      }
      if (!holds) return;
      this.holdingMail--;
      this.lastHeldMailEnd = endedAt;
    });
    const fault: InjectedFault = { ...f, target, startedAt, endedAt, detail, evidence, waitedMs };
    this.done.push(fault);
    const waited =
      waitedMs > 50 ? `, waited ${waitedMs} ms for the target${DOWNSTREAM_OUTAGES.has(f.kind) ? ' or the other downstream' : ''}` : '';
    this.d.log(
      `fault ${f.kind} on ${target} (${((fault.endedAt - startedAt) / 1000).toFixed(1)} s${waited}): ${detail}${evidence ? '' : ' [NO EFFECT SEEN: not counted]'}`,
    );
  }
}
