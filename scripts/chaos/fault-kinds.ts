/*
 * The kinds of fault the chaos run injects (faults/ carries each one out) and what the judge is
 * told of each one carried out.
 */

/**
 * Each kind, in the order of the report: what it hits (no two faults on one target at once; a
 * worker kill hits its own worker, pg_terminate_backend and a restart both act on the server),
 * whether it is a fault of the events path (JetStream relay and earnings consumer: planned and
 * required only when that part runs), and what the report calls it.
 */
export const KINDS = {
  'worker-kill': { target: 'worker', events: false, report: 'worker SIGKILL (mid-handlers)' },
  'api-kill': { target: 'api', events: false, report: 'API SIGKILL' },
  'smtp-outage': { target: 'smtp', events: false, report: 'SMTP server down' },
  'pg-restart': { target: 'postgres', events: false, report: 'Postgres restart (postmaster start time changed)' },
  'pg-terminate-workers': {
    target: 'postgres',
    events: false,
    report: 'pg_terminate_backend on worker connections (backends ended)',
  },
  'consumer-kill': { target: 'earnings-consumer', events: true, report: 'earnings consumer SIGKILL' },
  'nats-outage': { target: 'nats', events: true, report: 'nats-server down (exit seen, port refused)' },
  'stream-delete': { target: 'events stream', events: true, report: 'events stream deleted (recreated: its creation time changed)' },
  'forged-event': { target: 'events stream', events: true, report: 'forged booking.created published (PubAck)' },
  'nats-node-kill': { target: 'nats', events: true, report: 'one NATS node SIGKILLed (back, current again)' },
  'nats-node-wipe': { target: 'nats', events: true, report: 'one NATS node back with its store wiped (current again)' },
} as const;

export type FaultKind = keyof typeof KINDS;
export const FAULT_KINDS = Object.keys(KINDS) as FaultKind[];
/** The faults of the events path: planned and required only when that part runs. */
export const EVENT_FAULT_KINDS: FaultKind[] = FAULT_KINDS.filter((k) => KINDS[k].events);

/** A fault as the injector carried it out. Only one with `evidence` counts as injected. */
export interface FaultOutcome {
  kind: FaultKind;
  /** What it hit: 'worker-0', 'api', 'smtp', 'postgres'. No two faults on one target at once. */
  target: string;
  startedAt: number;
  endedAt: number;
  detail: string;
  /** The observed effect (the pid's exit, the backends that ended, the new postmaster start time); null: none seen. */
  evidence: string | null;
  /**
   * A NATS outage kept apart from every fault that holds mail up by itself (faults/injector.ts
   * holds those back around it): the outages the email pace is judged on (rules/email-pace.ts).
   */
  isolated?: boolean;
}

/** How many of each kind. */
export function countByKind(faults: Iterable<{ kind: FaultKind }>): Record<FaultKind, number> {
  const n = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  for (const f of faults) n[f.kind]++;
  return n;
}
