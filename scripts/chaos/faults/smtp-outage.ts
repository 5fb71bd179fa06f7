import { setTimeout as sleep } from 'node:timers/promises';
import { killEvidence, type FaultEffect, type InjectorDeps, type PlannedFault } from './types.ts';

/** Fault "smtp-outage": SIGKILL the SMTP server, start it again after `downMs`, wait until it listens. */
export async function smtpOutage(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  const seen = await d.smtp.kill('SIGKILL');
  await sleep(f.downMs);
  d.smtp.start();
  await d.waitSmtpUp();
  return {
    detail: `SMTP server killed (${seen ? `pid ${seen.pid}` : 'no process running'}), restarted after ${f.downMs} ms`,
    evidence: killEvidence(seen, 'SIGKILL'),
  };
}
