/*
 * The kinds of fault the chaos run injects (faults/ carries each one out) and what the judge is
 * told of each one carried out.
 */

export type FaultKind =
  | 'worker-kill'
  | 'api-kill'
  | 'smtp-outage'
  | 'pg-restart'
  | 'pg-terminate-workers'
  | 'consumer-kill'
  | 'nats-outage'
  | 'stream-delete'
  | 'forged-event'
  | 'nats-node-kill'
  | 'nats-node-wipe';
/** The faults of the events path (JetStream relay and earnings consumer): planned and required only when that part runs. */
export const EVENT_FAULT_KINDS: FaultKind[] = [
  'consumer-kill',
  'nats-outage',
  'stream-delete',
  'forged-event',
  'nats-node-kill',
  'nats-node-wipe',
];
export const FAULT_KINDS: FaultKind[] = [
  'worker-kill',
  'api-kill',
  'smtp-outage',
  'pg-restart',
  'pg-terminate-workers',
  ...EVENT_FAULT_KINDS,
];

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
