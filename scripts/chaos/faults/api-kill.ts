import { setTimeout as sleep } from 'node:timers/promises';
import { killEvidence, type FaultEffect, type InjectorDeps, type PlannedFault } from './types.ts';

/** Fault "api-kill": SIGKILL the API, start it again after `downMs`, wait until it answers. */
export async function apiKill(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  const seen = await d.api.kill('SIGKILL');
  await sleep(f.downMs);
  d.api.start();
  await d.waitApiUp();
  return {
    detail: `SIGKILL API (${seen ? `pid ${seen.pid}` : 'no process running'}), down ${f.downMs} ms before restart`,
    evidence: killEvidence(seen, 'SIGKILL'),
  };
}
