import type { FaultEffect, InjectorDeps, PlannedFault } from './types.ts';

/** Fault "stream-delete": Delete the events stream under the relay and the consumer; the evidence is its recreation. */
export async function streamDelete(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  if (!d.events) return { detail: 'no events path in this run: no stream to delete', evidence: null };
  const seen = await d.events.deleteStream();
  const back = seen.createdAfter
    ? `recreated (created ${seen.createdAfter}${seen.groupBack ? ', with the group durable on it' : ', the group durable NOT back'}${seen.backAfterMs === null ? '' : ` ${seen.backAfterMs} ms after the delete`})`
    : 'NOT recreated within the bound';
  return {
    detail: seen.createdBefore
      ? `events stream (created ${seen.createdBefore}, ${seen.messagesBefore} messages) deleted${seen.deleted ? '' : ' (the server said no)'}; ${back}`
      : 'no events stream to delete',
    evidence:
      seen.deleted && seen.createdBefore && seen.createdAfter && seen.createdAfter !== seen.createdBefore
        ? `stream created ${seen.createdBefore} before, ${seen.createdAfter} after`
        : null,
  };
}
