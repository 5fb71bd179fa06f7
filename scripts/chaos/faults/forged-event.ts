import type { FaultEffect, InjectorDeps, PlannedFault } from './types.ts';

/**
 * Fault "forged-event": publish a forged booking.created on the stream (events/forge.ts); the
 * evidence is the PubAck.
 */
export async function forgedEvent(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
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
