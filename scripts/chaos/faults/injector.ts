import { setTimeout as sleep } from 'node:timers/promises';
import { EVENT_FAULT_KINDS, KINDS, type FaultKind } from '../fault-kinds.ts';
import { HOLDS_MAIL_UP, PACE_BESIDE_MS } from '../rules/email-pace.ts';
import { CARRY_OUT } from './carry-out.ts';
import type { InjectedFault, InjectorDeps, PlannedFault } from './types.ts';

/*
 * The injector: carries the fault schedule (plan.ts) out against the running processes, each
 * kind as its module says (carry-out.ts). It looks at its plan every TICK_MS, and whenever a fault
 * ends, and starts each fault whose turn has come; what it knows is the plan itself, each fault
 * with the times it came due, started and ended. Faults on different targets may overlap (a
 * worker may be killed while Postgres restarts; real outages do not take turns either), but never
 * two on one target: a second kill of a process that is already down kills nothing and cuts the
 * first outage short. A fault due while its target is still under another one waits for it, in
 * the order they came due.
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

/** How often the injector looks at its plan, ms. */
const TICK_MS = 10;

/** One fault of the plan on its way; times in ms epoch. */
interface Entry {
  f: PlannedFault;
  target: string;
  /** Its target, and the events path's lane for a fault of that path: one fault at a time in each. */
  lanes: string[];
  due: number;
  /** Held by a quiet: how far into it it was due, and when it goes once the quiet is over. */
  late?: number;
  releaseAt?: number;
  /** When it joined its lanes (its wait counts from then), and its place in them. */
  queuedAt?: number;
  place?: number;
  startedAt?: number;
  endedAt?: number;
  /** Not due yet when the run settled: never carried out. */
  cancelled?: boolean;
}

export class FaultInjector {
  readonly done: InjectedFault[] = [];
  private entries: Entry[] = [];
  private ticker: NodeJS.Timeout | undefined;
  private places = 0;
  /** When the quiets on now began. */
  private quietSince: number | undefined;

  constructor(private readonly d: InjectorDeps) {}

  private get quietMs() {
    return this.d.quietMs ?? QUIET_MS;
  }

  /** Schedules every fault relative to now. */
  start(plan: PlannedFault[]) {
    const t0 = Date.now();
    this.entries = plan.map((f) => {
      const target = faultTarget(f);
      return { f, target, lanes: EVENTS_PATH_FAULTS.has(f.kind) ? [target, EVENTS_PATH] : [target], due: t0 + f.at };
    });
    this.ticker = setInterval(() => this.tick(), TICK_MS);
    this.tick();
  }

  private live(which: (e: Entry) => boolean): Entry[] {
    return this.entries.filter((e) => !e.cancelled && which(e));
  }

  private tick() {
    const now = Date.now();
    const q = this.quietMs;
    const quiets = this.live((e) => !!e.f.isolated && now >= e.due - q && !(e.endedAt !== undefined && now >= e.endedAt + q));
    this.quietSince = quiets.length ? (this.quietSince ?? Math.min(...quiets.map((e) => e.due - q))) : undefined;
    for (const e of this.live((e) => e.queuedAt === undefined && now >= e.due)) {
      if (holdsMailUp(e.f)) {
        // Not in any lane while it waits: the isolated outage must never queue behind it. As far
        // after the quiet as it was due into it: the faults held keep their spacing.
        e.late ??= this.quietSince === undefined ? 0 : Math.max(0, e.due - this.quietSince);
        if (quiets.length === 0) e.releaseAt ??= now + e.late;
        if (e.releaseAt === undefined || now < e.releaseAt) continue;
      }
      e.queuedAt = now;
    }
    // A stream deletion joins its lanes only once every node fault of the plan has ended.
    const nodeFaultsLeft = this.live((e) => NODE_FAULTS.has(e.f.kind) && e.endedAt === undefined).length > 0;
    for (const e of this.live((e) => e.queuedAt !== undefined && e.place === undefined))
      if (e.f.kind !== 'stream-delete' || !nodeFaultsLeft) e.place = this.places++;
    const taken = new Set(this.live((e) => e.startedAt !== undefined && e.endedAt === undefined).flatMap((e) => e.lanes));
    for (const e of this.live((e) => e.place !== undefined && e.startedAt === undefined).sort((a, b) => a.place! - b.place!)) {
      const free = e.lanes.every((lane) => !taken.has(lane));
      // Waiting for its turn, it keeps its lanes: what comes due after it waits behind it.
      for (const lane of e.lanes) taken.add(lane);
      if (free && this.turnCome(e.f, now)) this.launch(e, now);
    }
  }

  /**
   * An isolated outage: no fault that holds mail up has been in progress for the quiet's length
   * (those queued before the quiet began may have started inside it). A downstream outage: none
   * of them in progress, the last one over for the gap. Taken at once, so two waiting never both start.
   */
  private turnCome(f: PlannedFault, now: number): boolean {
    const over = (which: (g: PlannedFault) => boolean, forMs: number) =>
      this.live((e) => e.startedAt !== undefined && which(e.f)).every((e) => e.endedAt !== undefined && now >= e.endedAt + forMs);
    if (f.isolated && !over(holdsMailUp, this.quietMs)) return false;
    return !DOWNSTREAM_OUTAGES.has(f.kind) || over((g) => DOWNSTREAM_OUTAGES.has(g.kind), this.d.downstreamGapMs ?? 0);
  }

  private launch(e: Entry, now: number) {
    e.startedAt = now;
    void this.inject(e, now, now - e.queuedAt!)
      .catch((err) => this.d.log(`fault ${e.f.kind} failed: ${String(err)}`))
      .finally(() => {
        e.endedAt ??= Date.now();
        this.tick();
      });
  }

  /** Waits for the faults in progress or due (and cancels those not due yet). */
  async settle(): Promise<void> {
    // A deletion waiting for node faults not due yet, or faults held by the quiet of an isolated
    // outage not due yet: they go now.
    const now = Date.now();
    for (const e of this.entries) if (now < e.due) e.cancelled = true;
    this.tick();
    while (this.live((e) => e.endedAt === undefined).length) await sleep(TICK_MS);
    clearInterval(this.ticker);
  }

  get lastFaultEndedAt(): number | undefined {
    return this.done.length ? Math.max(...this.done.map((f) => f.endedAt)) : undefined;
  }

  private async inject(e: Entry, startedAt: number, waitedMs: number): Promise<void> {
    const { f, target } = e;
    // One end time for the fault's record and for the gap and the quiet counted from it: read twice,
    // the clock once moved a millisecond between, and a gap of 150 ms measured 149 in the record.
    const { detail, evidence } = await CARRY_OUT[f.kind](f, this.d).finally(() => (e.endedAt = Date.now()));
    const fault: InjectedFault = { ...f, target, startedAt, endedAt: e.endedAt!, detail, evidence, waitedMs };
    this.done.push(fault);
    const waited =
      waitedMs > 50 ? `, waited ${waitedMs} ms for the target${DOWNSTREAM_OUTAGES.has(f.kind) ? ' or the other downstream' : ''}` : '';
    this.d.log(
      `fault ${f.kind} on ${target} (${((fault.endedAt - startedAt) / 1000).toFixed(1)} s${waited}): ${detail}${evidence ? '' : ' [NO EFFECT SEEN: not counted]'}`,
    );
  }
}
