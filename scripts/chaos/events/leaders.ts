import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { ChaosNats } from './nats-cluster.ts';

/** The cluster, the run's stream and its group: what the node faults and these waits act on. */
export type StreamOnCluster = { nats: ChaosNats; stream: string; group: string };

/** Which node leads `what` (the stream, or the group's durable) now; undefined: none, or NATS not answering. */
async function leaderOf(s: StreamOnCluster, what: 'stream' | 'group'): Promise<number | undefined> {
  const nc = await connect({ servers: s.nats.servers, timeout: 3_000 }).catch(() => undefined);
  if (!nc) return undefined;
  try {
    const jsm = await jetstreamManager(nc, { timeout: 3_000, checkAPI: false });
    return await s.nats.leaderOf(jsm, s.stream, what === 'group' ? s.group : undefined);
  } catch {
    return undefined;
  } finally {
    await nc.close().catch(() => undefined);
  }
}

/**
 * The node leading the stream or the group, waiting (up to `withinMs`) while it has none: after
 * an earlier fault the cluster may still be electing, and a leader fault must hit a leader.
 */
export async function leaderWithin(s: StreamOnCluster, what: 'stream' | 'group', withinMs: number): Promise<number | undefined> {
  const t0 = Date.now();
  for (;;) {
    const leader = await leaderOf(s, what);
    if (leader !== undefined || Date.now() - t0 >= withinMs) return leader;
    await sleep(200);
  }
}

/**
 * Waits (up to `withinMs`) until node `i` itself holds the stream up to where its leader was
 * once the node was back, and the group's durable: in step with the others again, so the next
 * node fault cannot take the last copy of anything. Asked of the node (its /jsz), not of the
 * leader, whose view of a replica lags: it once called a node wiped 15 ms earlier current. How
 * long it took, or null.
 */
export async function caughtUp(s: StreamOnCluster, i: number, withinMs: number): Promise<number | null> {
  const t0 = Date.now();
  const nc = await connect({ servers: s.nats.servers, timeout: 3_000, maxReconnectAttempts: -1 }).catch(() => undefined);
  if (!nc) return null;
  try {
    const jsm = await jetstreamManager(nc, { timeout: 3_000, checkAPI: false });
    let target: number | undefined;
    while (Date.now() - t0 < withinMs) {
      target ??= (await jsm.streams.info(s.stream).catch(() => undefined))?.state.last_seq;
      const mine = await s.nats.nodes[i]!.replicaOf(s.stream);
      if (target !== undefined && mine && mine.lastSeq >= target && mine.consumers.includes(s.group)) return Date.now() - t0;
      await sleep(200);
    }
    return null;
  } finally {
    await nc.close().catch(() => undefined);
  }
}
