import type { CaseFile } from '../case-file.ts';
import { checkResult, type CheckResult } from '../checks.ts';
import { lc, type OutboxRow } from '../evidence.ts';

/** What is wrong with one booking event of a 550 guest: it must be DEAD with a 550, its host's email done. */
function bounceViolations(m: OutboxRow): string[] {
  const v: string[] = [];
  if (m.status !== 'DEAD') v.push(`${m.topic} ${m.publicId} to a 550 recipient is ${m.status}, not DEAD`);
  else if (!m.lastError || !/550/.test(m.lastError)) v.push(`${m.topic} ${m.publicId} DEAD without a 550 in last_error: ${m.lastError}`);
  else if (/\S+@\S+\.\w+/.test(m.lastError)) v.push(`${m.topic} ${m.publicId} last_error shows an email address`);
  // The host's email of the same event must still have gone out (handlers are tracked apart).
  const hostHandler = m.topic === 'booking.created' ? 'email.host-new-booking' : 'email.host-cancellation';
  if (!m.handlersDone.includes(hostHandler))
    v.push(`${m.topic} ${m.publicId}: ${hostHandler} not recorded done (last_error: ${m.lastError})`);
  return v;
}

/** Rule: DEAD is exactly the events of the 550 recipients, each with its last_error; nothing else. */
export function deadOnlyBounces(c: CaseFile): CheckResult {
  const v: string[] = [];
  for (const m of c.input.outbox) {
    const b = m.key ? c.bookingById.get(m.key) : undefined;
    const involvesBounce = !!b && (m.topic === 'booking.created' || m.topic === 'booking.cancelled') && c.bounce.has(lc(b.guestEmail));
    if (involvesBounce) v.push(...bounceViolations(m));
    else if (m.status === 'DEAD') v.push(`${m.topic} ${m.publicId} is DEAD after ${m.attempts} attempts: ${m.lastError}`);
  }
  return checkResult("the 550 recipients' messages are DEAD with last_error, and nothing else is DEAD", v);
}
