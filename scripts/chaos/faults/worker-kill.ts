import { setTimeout as sleep } from 'node:timers/promises';
import { killEvidence, type FaultEffect, type InjectorDeps, type PlannedFault } from './types.ts';

/**
 * Fault "worker-kill": SIGKILL one worker, mid-handlers when it can (it just finished a handler),
 * and start it again after `downMs`.
 */
export async function workerKill(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
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
