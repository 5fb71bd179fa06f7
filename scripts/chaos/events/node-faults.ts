import { setTimeout as sleep } from 'node:timers/promises';
import { caughtUp, leaderWithin } from './leaders.ts';
import type { EventsStage, NatsNodeObserved, NatsOutageObserved } from './observed.ts';

/** Every node down for `ms` (SIGTERM), then back on the same ports and stores. */
export async function natsOutage(s: EventsStage, ms: number): Promise<NatsOutageObserved> {
  const stopped = await s.nats.stop();
  const refusedWhileDown = !(await s.nats.accepting());
  await sleep(ms);
  await s.nats.start();
  // Listening is not leading: the next fault in the lane waits (bounded) until the stream has
  // a leader again, rather than meet the cluster mid-election.
  await leaderWithin(s, 'stream', 30_000);
  return { stopped, refusedWhileDown, restartedPid: s.nats.pid ?? null };
}

/**
 * SIGKILL one node (the stream's leader when `leader`, else node `index`), down `downMs`, start
 * it again on its store, and wait until it is current again (bounded by `catchUpMs`: a minute, as
 * for a wiped node; a node killed seconds after the whole cluster's outage, on a loaded machine,
 * was not current again within 30 s).
 */
export async function killNatsNode(
  s: EventsStage,
  target: { leader: boolean; index: number },
  downMs: number,
  catchUpMs = 60_000,
): Promise<NatsNodeObserved> {
  const leader = target.leader ? await leaderWithin(s, 'stream', 15_000) : undefined;
  const i = leader ?? target.index % s.nats.size;
  const node = s.nats.nodes[i]!;
  const seen = await node.stop('SIGKILL');
  await sleep(downMs);
  await node.start();
  return {
    node: node.name,
    wasLeader: leader !== undefined,
    seen,
    wiped: false,
    caughtUpAfterMs: await caughtUp(s, i, catchUpMs),
  };
}

/**
 * SIGKILL one node (the one leading the earnings group when `leader`, else node `index`),
 * remove its store, start it empty, and wait until the others have given it the stream and
 * the group again (bounded by `catchUpMs`).
 */
export async function wipeNatsNode(
  s: EventsStage,
  target: { leader: boolean; index: number },
  catchUpMs = 60_000,
): Promise<NatsNodeObserved> {
  const leader = target.leader ? await leaderWithin(s, 'group', 15_000) : undefined;
  const i = leader ?? target.index % s.nats.size;
  const node = s.nats.nodes[i]!;
  const seen = await node.stop('SIGKILL');
  const wiped = node.wipeStore();
  await node.start();
  return { node: node.name, wasLeader: leader !== undefined, seen, wiped, caughtUpAfterMs: await caughtUp(s, i, catchUpMs) };
}
