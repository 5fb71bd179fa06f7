import { killEvidence, type FaultEffect, type InjectorDeps, type PlannedFault } from './types.ts';

/** Fault "consumer-kill": SIGKILL the earnings consumer (events/consumer.ts), down `downMs`. */
export async function consumerKill(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  if (!d.events) return { detail: 'no events path in this run: nothing to kill', evidence: null };
  const { seen, consuming } = await d.events.killConsumer(f.downMs);
  return {
    detail: `SIGKILL earnings consumer (${seen ? `pid ${seen.pid}` : 'no process running'}) ${consuming ? 'while pulling from its group' : 'while starting'}, down ${f.downMs} ms`,
    evidence: killEvidence(seen, 'SIGKILL'),
  };
}
