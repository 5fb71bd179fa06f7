import type {
  ConsumerKillObserved,
  ForgedEventObserved,
  ForgeryKind,
  NatsNodeObserved,
  NatsOutageObserved,
  StreamDeleteObserved,
} from './events.ts';
import type { ExitObserved } from './processes.ts';
import type { Rng } from './rng.ts';
import type { FaultKind, FaultOutcome } from './fault-kinds.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * The fault schedule, drawn from the seed before the load starts (so the same --seed gives the
 * same faults at the same offsets), and the injector that carries it out against the running
 * processes. Faults on different targets may overlap (a worker may be killed while Postgres
 * restarts; real outages do not take turns either), but never two on one target: a second kill of
 * a process that is already down kills nothing and cuts the first outage short. A fault due while
 * its target is still under another one waits for it.
 *
 * A fault counts only with evidence of its effect, observed by the injector: the killed pid's exit
 * (by the signal sent), more than zero backends that actually ended, a postmaster start time that
 * changed, a nats-server whose exit was seen and whose port refused connections. One without (a
 * kill with nothing running, no connection to terminate) is recorded with `evidence: null`,
 * reported, and not counted (verdict.ts).
 *
 * The workers' two downstreams, the SMTP server and nats-server, are also never down close
 * together: an outage of one waits until the other has been back for `downstreamGapMs`. A message
 * whose email and relay handlers fail through both outages back to back would spend two outages'
 * worth of attempts; the retry window is sized for one (run.ts), and a gap longer than the longest
 * backoff gives every message an attempt between the two.
 */

export interface PlannedFault {
  kind: FaultKind;
  /** Offset from the start of the load, ms. */
  at: number;
  /** How long the victim stays down (kills, outages, the restart's pause), ms. */
  downMs: number;
  /** Which worker (worker-kill). */
  worker?: number;
  /** How the event lies (forged-event), and which recent booking it names, in [0, 1). */
  forgery?: ForgeryKind;
  pick?: number;
  /** Which NATS node (nats-node-kill, nats-node-wipe): the leader of the stream (kill) or of the group (wipe), or node `node`. */
  leader?: boolean;
  node?: number;
}

export type InjectedFault = FaultOutcome & PlannedFault & { waitedMs: number };

export interface ScheduleOptions {
  durationMs: number;
  workers: number;
  /** The longest an SMTP outage may last and still be shorter than the retry window. */
  maxSmtpOutageMs: number;
  /** The events path runs (nats-server and the earnings consumer): plan its faults too. */
  events?: { maxNatsOutageMs: number };
}

/**
 * Faults fall between 8% and 75% of the load, so the run also shows the system settling after the
 * last one. Counts scale with the duration; a one-minute run still gets every kind.
 */
export function planFaults(rng: Rng, o: ScheduleOptions): PlannedFault[] {
  const d = o.durationMs;
  const when = (from = 0.08, to = 0.75) => Math.round(rng.between(from * d, to * d));
  const seconds = d / 1000;
  const plan: PlannedFault[] = [];
  for (let i = 0; i < Math.max(4, Math.round(seconds / 15)); i++) {
    plan.push({ kind: 'worker-kill', at: when(), downMs: rng.int(300, 3_000), worker: rng.int(0, o.workers - 1) });
  }
  for (let i = 0; i < Math.max(1, Math.round(seconds / 90)); i++) {
    plan.push({ kind: 'api-kill', at: when(), downMs: rng.int(200, 2_000) });
  }
  for (let i = 0; i < Math.max(1, Math.round(seconds / 120)); i++) {
    plan.push({ kind: 'smtp-outage', at: when(), downMs: rng.int(1_000, Math.max(1_000, o.maxSmtpOutageMs)) });
  }
  plan.push({ kind: 'pg-restart', at: when(0.3, 0.6), downMs: rng.int(0, 1_500) });
  for (let i = 0; i < Math.max(2, Math.round(seconds / 30)); i++) {
    plan.push({ kind: 'pg-terminate-workers', at: when(), downMs: 0 });
  }
  // Drawn last, so the faults above are the same for a seed whether or not the events part runs.
  if (o.events) {
    for (let i = 0; i < Math.max(2, Math.round(seconds / 30)); i++) {
      plan.push({ kind: 'consumer-kill', at: when(), downMs: rng.int(200, 2_000) });
    }
    for (let i = 0; i < Math.max(1, Math.round(seconds / 90)); i++) {
      plan.push({
        kind: 'nats-outage',
        at: when(0.08, NODES_RESTART_BY),
        downMs: rng.int(1_000, Math.max(1_000, o.events.maxNatsOutageMs)),
      });
    }
    // Drawn after the events faults above, so those stay the same for a seed.
    for (let i = 0; i < Math.max(1, Math.round(seconds / 180)); i++) {
      plan.push({ kind: 'stream-delete', at: when(NODES_RESTART_BY + 0.05, 0.75), downMs: 0 });
    }
    // Both lies in every run: the first two forgeries are one of each, in an order drawn from the seed.
    const first: ForgeryKind = rng.chance(0.5) ? 'unknown-booking' : 'wrong-amount';
    for (let i = 0; i < Math.max(2, Math.round(seconds / 60)); i++) {
      const forgery: ForgeryKind =
        i === 0 ? first : i === 1 ? (first === 'unknown-booking' ? 'wrong-amount' : 'unknown-booking') : rng.pick(FORGERIES);
      plan.push({ kind: 'forged-event', at: when(), downMs: 0, forgery, pick: rng.next() });
    }
    // The cluster's node faults, drawn after every other so those stay the same for a seed. Half
    // the kills and wipes hit a leader: a leader lost is an election, the hardest moment.
    for (let i = 0; i < Math.max(1, Math.round(seconds / 45)); i++) {
      plan.push({
        kind: 'nats-node-kill',
        at: when(0.08, NODES_RESTART_BY),
        downMs: rng.int(500, 4_000),
        leader: rng.chance(0.5),
        node: rng.int(0, 2),
      });
    }
    for (let i = 0; i < Math.max(1, Math.round(seconds / 120)); i++) {
      plan.push({ kind: 'nats-node-wipe', at: when(0.08, NODES_RESTART_BY), downMs: 0, leader: rng.chance(0.5), node: rng.int(0, 2) });
    }
  }
  return plan.sort((a, b) => a.at - b.at);
}

const FORGERIES: ForgeryKind[] = ['unknown-booking', 'wrong-amount'];

/**
 * The share of the load by which every NATS node restart (an outage, a node kill or wipe) is due;
 * stream deletions come after it. nats-server before 2.11 mishandles a node that restarts after
 * a stream was deleted and recreated under the same name while it ran ("detected duplicate
 * assignment", "No RAFT group" in its log): that node stays on the deleted stream's RAFT group and
 * never holds the new stream, and a second node lost then loses the majority. Seen here with
 * Debian's 2.9.10 (nats-server pull requests 7510 and 8413 fix it); a server bug the run would
 * only rediscover, so the two kinds of fault are kept apart in time.
 */
const NODES_RESTART_BY = 0.5;

/** A process the injector can kill and start again (scripts/chaos/processes.ts Supervised). */
export interface Killable {
  kill(signal?: NodeJS.Signals): Promise<ExitObserved | null>;
  start(): void;
}

/** Just what the injector asks of the admin pool. */
export interface Queryable {
  query<R extends Record<string, unknown> = any>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

export interface InjectorDeps {
  workers: Killable[];
  api: Killable;
  smtp: Killable;
  postgres: { stop(): Promise<void>; start(): Promise<void> };
  admin: Queryable;
  /** When each worker last reported a handler outcome (ms epoch): "busy" means recently. */
  lastWorkerActivity: number[];
  /** Resolves once the process answers again (API: /health; SMTP: its port). */
  waitApiUp(): Promise<void>;
  waitSmtpUp(): Promise<void>;
  /** The events path (scripts/chaos/events.ts), when it runs. */
  events?: {
    /** SIGKILL the earnings consumer (once it is pulling, within a bound), start it again after `downMs`. */
    killConsumer(downMs: number): Promise<ConsumerKillObserved>;
    /** nats-server down for `ms`, then back on the same store. */
    natsOutage(ms: number): Promise<NatsOutageObserved>;
    /** Delete the events stream; resolves once the relay or the consumer has recreated it (bounded). */
    deleteStream(): Promise<StreamDeleteObserved>;
    /** Publish a forged booking.created on the stream; resolves once the consumer refused it (bounded). */
    forgeEvent(kind: ForgeryKind, pick: number): Promise<ForgedEventObserved>;
    /** SIGKILL one NATS node, start it after `downMs`; resolves once it is current again (bounded). */
    killNatsNode(target: { leader: boolean; index: number }, downMs: number): Promise<NatsNodeObserved>;
    /** SIGKILL one NATS node, remove its store, start it; resolves once it is current again (bounded). */
    wipeNatsNode(target: { leader: boolean; index: number }): Promise<NatsNodeObserved>;
  };
  /** How long the SMTP server and nats-server stay up between an outage of one and of the other (default 0). */
  downstreamGapMs?: number;
  log(line: string): void;
  /** How long to wait for terminated backends to disappear from pg_stat_activity (default 3 s). */
  backendGoneTimeoutMs?: number;
  /** How long pg_terminate_backend waits for a worker connection to exist (default 10 s). */
  connectionWaitMs?: number;
}

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
const EVENTS_PATH_FAULTS = new Set<FaultKind>([
  'consumer-kill',
  'nats-outage',
  'stream-delete',
  'forged-event',
  'nats-node-kill',
  'nats-node-wipe',
]);
const EVENTS_PATH = 'events path (consumer, NATS)';

const killEvidence = (seen: ExitObserved | null, signal: NodeJS.Signals) =>
  seen && seen.signal === signal ? `pid ${seen.pid} exited by ${signal}` : null;

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

  private async postmasterStart(): Promise<string | null> {
    // The pool's connections died with the old server: the first attempts may fail.
    for (let i = 0; i < 50; i++) {
      try {
        const { rows } = await this.d.admin.query<{ t: string }>('select pg_postmaster_start_time()::text as t');
        return rows[0]?.t ?? null;
      } catch {
        await sleep(100);
      }
    }
    return null;
  }

  private async run(f: PlannedFault): Promise<{ detail: string; evidence: string | null }> {
    const d = this.d;
    switch (f.kind) {
      case 'worker-kill': {
        const i = f.worker ?? 0;
        const w = d.workers[i]!;
        // Mid-handlers: wait (up to 3 s) until this worker has just finished a handler, i.e. it is
        // working through a batch and the next handlers are running.
        const deadline = Date.now() + 3_000;
        while (Date.now() - d.lastWorkerActivity[i]! > 150 && Date.now() < deadline) await sleep(20);
        const busy = Date.now() - d.lastWorkerActivity[i]! <= 150;
        const seen = await w.kill('SIGKILL');
        await sleep(f.downMs);
        w.start();
        return {
          detail: `SIGKILL worker ${i} (${seen ? `pid ${seen.pid}` : 'no process running'}) ${busy ? 'mid-handlers' : 'while idle'}, down ${f.downMs} ms`,
          evidence: killEvidence(seen, 'SIGKILL'),
        };
      }
      case 'api-kill': {
        const seen = await d.api.kill('SIGKILL');
        await sleep(f.downMs);
        d.api.start();
        await d.waitApiUp();
        return {
          detail: `SIGKILL API (${seen ? `pid ${seen.pid}` : 'no process running'}), down ${f.downMs} ms before restart`,
          evidence: killEvidence(seen, 'SIGKILL'),
        };
      }
      case 'smtp-outage': {
        const seen = await d.smtp.kill('SIGKILL');
        await sleep(f.downMs);
        d.smtp.start();
        await d.waitSmtpUp();
        return {
          detail: `SMTP server killed (${seen ? `pid ${seen.pid}` : 'no process running'}), restarted after ${f.downMs} ms`,
          evidence: killEvidence(seen, 'SIGKILL'),
        };
      }
      case 'pg-restart': {
        const before = await this.postmasterStart();
        const t0 = Date.now();
        await d.postgres.stop(); // fast shutdown: SIGINT to the postmaster
        const stopped = Date.now() - t0;
        await sleep(f.downMs);
        await d.postgres.start();
        const after = await this.postmasterStart();
        const changed = before !== null && after !== null && before !== after;
        return {
          detail: `Postgres fast shutdown (${stopped} ms) and start; down ${Date.now() - t0} ms in all; postmaster started ${before} → ${after}`,
          evidence: changed ? `pg_postmaster_start_time() ${before} → ${after}` : null,
        };
      }
      case 'pg-terminate-workers': {
        // Right after a restart or a worker kill there may be no worker connection yet: wait
        // (bounded) for one, so the fault severs live connections rather than nothing.
        const until = Date.now() + (d.connectionWaitMs ?? 10_000);
        for (;;) {
          const { rows: live } = await d.admin
            .query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where application_name like 'stayhub-worker%'`)
            .catch(() => ({ rows: [{ n: 0 }] }));
          if ((live[0]?.n ?? 0) > 0 || Date.now() > until) break;
          await sleep(100);
        }
        const { rows } = await d.admin.query<{ pid: number; name: string }>(
          // Materialized first, so pg_terminate_backend is only ever called on the workers' backends.
          `with w as materialized (
             select pid, application_name from pg_stat_activity
              where application_name like 'stayhub-worker%' and pid <> pg_backend_pid())
           select pid, application_name as name from w where pg_terminate_backend(pid)`,
        );
        // pg_terminate_backend only sends the signal: count the backends that are really gone.
        const pids = rows.map((r) => r.pid);
        let left = pids;
        const deadline = Date.now() + (d.backendGoneTimeoutMs ?? 3_000);
        while (left.length && Date.now() < deadline) {
          const { rows: alive } = await d.admin.query<{ pid: number }>('select pid from pg_stat_activity where pid = any($1::int[])', [
            left,
          ]);
          left = alive.map((r) => r.pid);
          if (left.length) await sleep(50);
        }
        const ended = pids.length - left.length;
        const names = [...new Set(rows.map((r) => r.name))].join(',') || 'none';
        return {
          detail: `pg_terminate_backend on ${pids.length} worker connection(s) (${names}); ${ended} ended`,
          evidence: ended > 0 ? `${ended} backend(s) ended: pids ${pids.filter((p) => !left.includes(p)).join(', ')}` : null,
        };
      }
      case 'consumer-kill': {
        if (!d.events) return { detail: 'no events path in this run: nothing to kill', evidence: null };
        const { seen, consuming } = await d.events.killConsumer(f.downMs);
        return {
          detail: `SIGKILL earnings consumer (${seen ? `pid ${seen.pid}` : 'no process running'}) ${consuming ? 'while pulling from its group' : 'while starting'}, down ${f.downMs} ms`,
          evidence: killEvidence(seen, 'SIGKILL'),
        };
      }
      case 'nats-outage': {
        if (!d.events) return { detail: 'no events path in this run: no nats-server to stop', evidence: null };
        const seen = await d.events.natsOutage(f.downMs);
        const how = seen.stopped
          ? `pid ${seen.stopped.pid} exited ${seen.stopped.signal ?? `with code ${seen.stopped.code}`}`
          : 'no server running';
        return {
          detail: `nats-server stopped (SIGTERM; ${how}), port ${seen.refusedWhileDown ? 'refused' : 'still accepted'} connections, started again on the same store after ${f.downMs} ms${seen.restartedPid ? ` (pid ${seen.restartedPid})` : ''}`,
          evidence:
            seen.stopped && seen.refusedWhileDown && seen.restartedPid !== null
              ? `nats-server pid ${seen.stopped.pid} exit seen, its port refused connections, pid ${seen.restartedPid} listening again`
              : null,
        };
      }
      case 'stream-delete': {
        if (!d.events) return { detail: 'no events path in this run: no stream to delete', evidence: null };
        const seen = await d.events.deleteStream();
        const back = seen.createdAfter
          ? `recreated (created ${seen.createdAfter}${seen.groupBack ? ', with the group durable on it' : ', the group durable NOT back'}${seen.backAfterMs === null ? '' : ` ${seen.backAfterMs} ms after the delete`})`
          : 'NOT recreated within the bound';
        return {
          detail: seen.createdBefore
            ? `events stream (created ${seen.createdBefore}, ${seen.messagesBefore} messages) deleted${seen.deleted ? '' : ' (the server said no)'}; ${back}`
            : 'no events stream to delete',
          evidence:
            seen.deleted && seen.createdBefore && seen.createdAfter && seen.createdAfter !== seen.createdBefore
              ? `stream created ${seen.createdBefore} before, ${seen.createdAfter} after`
              : null,
        };
      }
      case 'nats-node-kill':
      case 'nats-node-wipe': {
        if (!d.events) return { detail: 'no events path in this run: no NATS node to hit', evidence: null };
        const target = { leader: f.leader ?? false, index: f.node ?? 0 };
        const wipe = f.kind === 'nats-node-wipe';
        const seen = wipe ? await d.events.wipeNatsNode(target) : await d.events.killNatsNode(target, f.downMs);
        const who = `${seen.node}${seen.wasLeader ? (wipe ? ' (the earnings group leader)' : ' (the stream leader)') : ''}`;
        const exit = seen.seen ? `pid ${seen.seen.pid} exited ${seen.seen.signal ?? `with code ${seen.seen.code}`}` : 'not running';
        const back =
          seen.caughtUpAfterMs === null ? 'NOT current again within the bound' : `current again ${seen.caughtUpAfterMs} ms after its start`;
        const detail = wipe
          ? `NATS node ${who} SIGKILLed (${exit}), store ${seen.wiped ? 'wiped' : 'NOT wiped'}, started empty; ${back}`
          : `NATS node ${who} SIGKILLed (${exit}), started again on its store after ${f.downMs} ms; ${back}`;
        const ok = killEvidence(seen.seen, 'SIGKILL') !== null && seen.caughtUpAfterMs !== null && (!wipe || seen.wiped);
        return {
          detail,
          evidence: ok ? `${seen.node}: pid ${seen.seen!.pid} exited by SIGKILL${wipe ? ', store removed' : ''}, current again` : null,
        };
      }
      case 'forged-event': {
        if (!d.events) return { detail: 'no events path in this run: nowhere to publish', evidence: null };
        const seen = await d.events.forgeEvent(f.forgery ?? 'unknown-booking', f.pick ?? 0);
        const e = seen.forged;
        if (!e) return { detail: `forged booking.created (${f.forgery}) not published: ${seen.failed}`, evidence: null };
        const refused =
          seen.deadLetteredAfterMs === null
            ? 'not dead-lettered within the wait'
            : `dead-lettered ${seen.deadLetteredAfterMs} ms later: ${seen.lastError?.slice(0, 160)}`;
        return {
          detail: `forged booking.created ${e.messageId} (${e.kind}: booking ${e.bookingId}, property ${e.propertyId}, total ${e.total}${e.realTotal === null ? '' : ` for a real ${e.realTotal}`}) published; ${refused}`,
          evidence: `PubAck seq ${e.seq}`,
        };
      }
    }
  }
}
