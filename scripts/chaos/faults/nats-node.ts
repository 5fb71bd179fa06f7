import { killEvidence, type FaultEffect, type InjectorDeps, type PlannedFault } from './types.ts';

/**
 * Fault "nats-node-kill" and "nats-node-wipe": one NATS node SIGKILLed and started again on its
 * store (nats-node-kill) or with its store wiped (nats-node-wipe), the stream's or the group's
 * leader when `leader`; the evidence includes the node being current again.
 */
export async function natsNodeKillOrWipe(f: PlannedFault, d: InjectorDeps): Promise<FaultEffect> {
  if (!d.events) return { detail: 'no events path in this run: no NATS node to hit', evidence: null };
  const target = { leader: f.leader ?? false, index: f.node ?? 0 };
  const wipe = f.kind === 'nats-node-wipe';
  const seen = wipe ? await d.events.wipeNatsNode(target) : await d.events.killNatsNode(target, f.downMs);
  const who = `${seen.node}${seen.wasLeader ? (wipe ? ' (the earnings group leader)' : ' (the stream leader)') : ''}`;
  const exit = seen.seen ? `pid ${seen.seen.pid} exited ${seen.seen.signal ?? `with code ${seen.seen.code}`}` : 'not running';
  const back =
    seen.caughtUpAfterMs === null ? 'NOT current again within the bound' : `current again ${seen.caughtUpAfterMs} ms after its start`;
  const detail = wipe
    ? `NATS node ${who} SIGKILLed (${exit}), store ${seen.wiped ? 'wiped' : 'NOT wiped'}, started empty; ${back}`
    : `NATS node ${who} SIGKILLed (${exit}), started again on its store after ${f.downMs} ms; ${back}`;
  const ok = killEvidence(seen.seen, 'SIGKILL') !== null && seen.caughtUpAfterMs !== null && (!wipe || seen.wiped);
  return {
    detail,
    evidence: ok ? `${seen.node}: pid ${seen.seen!.pid} exited by SIGKILL${wipe ? ', store removed' : ''}, current again` : null,
  };
}
