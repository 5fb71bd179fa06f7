import type { FaultEffect, InjectorDeps, PlannedFault } from './types.ts';

/** Fault "nats-outage": every NATS node down for `downMs`, then back on the same stores (events/node-faults.ts). */
export async function natsOutage(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
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
