import { setTimeout as sleep } from 'node:timers/promises';
import { caughtUp, leaderWithin, type StreamOnCluster } from './leaders.ts';

/** Every node down for `ms` (SIGTERM), then back on the same ports and stores. */
export async function natsOutage(s: StreamOnCluster, ms: number) {
  // The first node's exit, every node's exit seen; null: a node was not running.
  const stopped = await s.nats.stop();
  const refusedWhileDown = !(await s.nats.accepting());
  await sleep(ms);
  await s.nats.start();
  // Listening is not leading: the next fault in the lane waits (bounded) until the stream has
  // a leader again, rather than meet the cluster mid-election.
  await leaderWithin(s, 'stream', 30_000);
  return { stopped, refusedWhileDown, restartedPid: s.nats.pid ?? null };
}

/** Which node a node fault hits: the leader (of the stream for a kill, of the group for a wipe), or node `index`. */
export type NodeTarget = { leader: boolean; index: number };

/**
 * SIGKILL one node and start it again after `downMs`, on its store (nats-node-kill) or with its
 * store removed (nats-node-wipe: it comes back empty, and the others give it the stream and the
 * group again); then wait until it is current again, bounded by `catchUpMs`: a minute, as for a
 * wiped node; a node killed seconds after the whole cluster's outage, on a loaded machine, was not
 * current again within 30 s. `wasLeader`: it led what `target` names when it was hit.
 */
export async function hitNatsNode(s: StreamOnCluster, target: NodeTarget, downMs: number, wipe: boolean, catchUpMs = 60_000) {
  const leader = target.leader ? await leaderWithin(s, wipe ? 'group' : 'stream', 15_000) : undefined;
  const i = leader ?? target.index % s.nats.size;
  const node = s.nats.nodes[i]!;
  const seen = await node.stop('SIGKILL');
  await sleep(downMs);
  const wiped = wipe && node.wipeStore();
  await node.start();
  return { node: node.name, wasLeader: leader !== undefined, seen, wiped, caughtUpAfterMs: await caughtUp(s, i, catchUpMs) };
}
