import { setTimeout as sleep } from 'node:timers/promises';
import { EVENT_FAULT_KINDS, type FaultKind } from '../fault-kinds.ts';
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
 * reported, and not counted (rules/something-to-judge.ts).
 *
 * The workers' two downstreams, the SMTP server and nats-server, are also never down close
 * together: an outage of one waits until the other has been back for `downstreamGapMs`. A message
 * whose email and relay handlers fail through both outages back to back would spend two outages'
 * worth of attempts; the retry window is sized for one (settings.ts), and a gap longer than the longest
 * backoff gives every message an attempt between the two.
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

/** What a fault hits. pg_terminate_backend and a restart both act on the server: one at a time. */
export function faultTarget(f: PlannedFault): string {
  switch (f.kind) {
    case 'worker-kill':
      return `worker-${f.worker ?? 0}`;
    case 'api-kill':
      return 'api';
    case 'smtp-outage':
      return 'smtp';
    case 'pg-restart':
    case 'pg-terminate-workers':
      return 'postgres';
    case 'consumer-kill':
      return 'earnings-consumer';
    case 'nats-outage':
    case 'nats-node-kill':
    case 'nats-node-wipe':
      return 'nats';
    case 'stream-delete':
    case 'forged-event':
      return 'events stream';
  }
}

/** The workers' downstreams: their outages are kept apart (downstreamGapMs). */
const DOWNSTREAM_OUTAGES = new Set<FaultKind>(['smtp-outage', 'nats-outage']);

/** The lane in `busy` that the downstream outages share (besides each one's own target). */
const DOWNSTREAM = 'downstream (SMTP, NATS)';

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

export class FaultInjector {
  readonly done: InjectedFault[] = [];
  private running = new Set<Promise<void>>();
  private timers: NodeJS.Timeout[] = [];
  /** Per target, the fault in progress (or queued last): the next one starts after it. */
  private busy = new Map<string, Promise<unknown>>();

  constructor(private readonly d: InjectorDeps) {}

  /** Schedules every fault relative to now. */
  start(plan: PlannedFault[]) {
    for (const f of plan) {
      this.timers.push(
        setTimeout(() => {
          const target = faultTarget(f);
          const downstream = DOWNSTREAM_OUTAGES.has(f.kind);
          const eventsPath = EVENTS_PATH_FAULTS.has(f.kind);
          const due = Date.now();
          const before = Promise.all([
            this.busy.get(target),
            downstream ? this.busy.get(DOWNSTREAM) : undefined,
            eventsPath ? this.busy.get(EVENTS_PATH) : undefined,
          ]);
          const p: Promise<void> = before
            .then(() => this.inject(f, target, Date.now() - due))
            .catch((err) => this.d.log(`fault ${f.kind} failed: ${String(err)}`))
            .finally(() => this.running.delete(p));
          this.busy.set(target, p);
          if (downstream)
            this.busy.set(
              DOWNSTREAM,
              p.then(() => pauseAtLeast(this.d.downstreamGapMs ?? 0)),
            );
          if (eventsPath) this.busy.set(EVENTS_PATH, p);
          this.running.add(p);
        }, f.at),
      );
    }
  }

  /** Waits for the faults in progress or queued (and cancels any not yet due). */
  async settle(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    while (this.running.size) await Promise.all([...this.running]);
  }

  get lastFaultEndedAt(): number | undefined {
    return this.done.length ? Math.max(...this.done.map((f) => f.endedAt)) : undefined;
  }

  private async inject(f: PlannedFault, target: string, waitedMs: number): Promise<void> {
    const startedAt = Date.now();
    const { detail, evidence } = await this.run(f);
    const fault: InjectedFault = { ...f, target, startedAt, endedAt: Date.now(), detail, evidence, waitedMs };
    this.done.push(fault);
    const waited =
      waitedMs > 50 ? `, waited ${waitedMs} ms for the target${DOWNSTREAM_OUTAGES.has(f.kind) ? ' or the other downstream' : ''}` : '';
    this.d.log(
      `fault ${f.kind} on ${target} (${((fault.endedAt - startedAt) / 1000).toFixed(1)} s${waited}): ${detail}${evidence ? '' : ' [NO EFFECT SEEN: not counted]'}`,
    );
  }

  private async run(f: PlannedFault) {
    return CARRY_OUT[f.kind](f, this.d);
  }
}
