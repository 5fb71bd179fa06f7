import type { EventsChaos } from '../events/events-chaos.ts';
import type { ForgeryKind } from '../events/observed.ts';
import type { FaultKind, FaultOutcome } from '../fault-kinds.ts';
import type { Supervised } from '../processes.ts';

/*
 * What a fault is (planned from the seed, carried out by the injector) and what carrying one out
 * may touch: the running processes and the admin pool (InjectorDeps). carry-out.ts carries out
 * each kind.
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
  /** A NATS outage the injector keeps apart from the faults that hold mail up by themselves (fault-kinds.ts). */
  isolated?: boolean;
}

export type InjectedFault = FaultOutcome & PlannedFault & { waitedMs: number };

/** A process the injector can kill and start again. */
export type Killable = Pick<Supervised, 'kill' | 'start'>;

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
  /** The events path's faults (events/events-chaos.ts), when that part runs. */
  events?: Pick<EventsChaos, 'killConsumer' | 'natsOutage' | 'deleteStream' | 'forgeEvent' | 'killNatsNode' | 'wipeNatsNode'>;
  /** How long the SMTP server and nats-server stay up between an outage of one and of the other (default 0). */
  downstreamGapMs?: number;
  /** How long before an isolated NATS outage and after it nothing that holds mail up starts (default injector.ts QUIET_MS). */
  quietMs?: number;
  log(line: string): void;
  /** How long to wait for terminated backends to disappear from pg_stat_activity (default 3 s). */
  backendGoneTimeoutMs?: number;
  /** How long pg_terminate_backend waits for a worker connection to exist (default 10 s). */
  connectionWaitMs?: number;
}

/** What carrying a fault out did: a line for the report and the effect seen (null: none, not counted). */
export type FaultEffect = Pick<FaultOutcome, 'detail' | 'evidence'>;
