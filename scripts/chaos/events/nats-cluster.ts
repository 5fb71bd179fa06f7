import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { natsServerAvailable, startNatsCluster, type NatsCluster, type NatsServerProcess } from '../../lib/nats.ts';
import { portOpen } from '../../../src/net/port-open.ts';
import type { ExitObserved } from '../processes.ts';

/*
 * The chaos run's own JetStream cluster (scripts/lib/nats.ts starts it): stores and logs under the
 * run's folder, a cluster the events faults stop whole, kill one node of, or wipe one node's store
 * of, and that restarts a node exiting unasked, as a process manager would.
 */

// Whether the events part can run, asked here by the chaos run's tests.
export { natsServerAvailable };

/**
 * Starts a JetStream cluster of `size` nodes, node i's store under `dir`/n<i> and its log in
 * `dir`/nats-n<i>.log, and waits until each listens. A node that exits unasked is started again
 * after half a second.
 */
export async function startChaosNats(dir = mkdtempSync(path.join(os.tmpdir(), 'chaos-nats-')), size = 3) {
  const unplannedExits: { at: number; code: number | null; signal: string | null; lastLines: string[] }[] = [];
  let nodes: readonly NatsServerProcess[] = [];
  const cluster = await startNatsCluster({
    name: 'chaos',
    dir,
    size,
    onUnplannedExit(i, { code, signal }, lastLines) {
      const node = nodes[i]!;
      unplannedExits.push({ at: Date.now(), code, signal, lastLines: [`${node.name}:`, ...lastLines] });
      setTimeout(() => void (!node.stopAsked && !node.running && node.start().catch(() => undefined)), 500);
    },
  });
  nodes = cluster.nodes;
  return {
    /** Every node, comma-separated: the processes' NATS_URL. */
    url: cluster.url,
    /** The client's server list (host:port of each node). */
    servers: cluster.servers,
    size,
    /** The first node's pid (undefined while it is down). */
    get pid(): number | undefined {
      return nodes[0]!.pid;
    },
    /** Every node is running. */
    get running(): boolean {
      return nodes.every((n) => n.running);
    },
    /** Exits the run did not cause, any node's; the node is started again, as a process manager would. */
    unplannedExits,
    /** Whether any node's port accepts a TCP connection right now. */
    accepting: async () => (await Promise.all(nodes.map((n) => portOpen(n.port)))).some(Boolean),
    /** Every node, same ports, same stores. */
    start: () => cluster.start(),
    /** Every node SIGTERMed, their exits awaited (the stores survive): the first node's exit, null when any was not running. */
    async stop(): Promise<ExitObserved | null> {
      const seen = await cluster.stop();
      return seen.every((e) => e !== null) ? seen[0]! : null;
    },
    /** Index of the node that leads `stream` (or its durable `consumer`) now; undefined while it has none. */
    leaderOf: (...args: Parameters<NatsCluster['leaderOf']>) => cluster.leaderOf(...args),
    /** Node `i`: its server name (as stream info names its leader) and pid. */
    node: (i: number) => ({ name: nodes[i]!.name, pid: nodes[i]!.pid }),
    /** SIGKILL node `i` and await its exit; null when it was not running. The store stays. */
    killNode: (i: number): Promise<ExitObserved | null> => nodes[i]!.stop('SIGKILL'),
    /** Starts node `i` on its ports with its store. */
    startNode: (i: number) => nodes[i]!.start(),
    /** Removes node `i`'s store (the node must be down): it comes back empty. Whether the folder was emptied. */
    wipeStore: (i: number) => nodes[i]!.wipeStore(),
    /**
     * What node `i` itself holds of `stream` (its monitoring endpoint, /jsz): its last sequence and
     * its consumers' names; null when it holds no such stream or does not answer. The leader's view
     * of a replica ("current") lags a node's loss by seconds; the node's own does not.
     */
    replicaOf: (i: number, stream: string) => nodes[i]!.replicaOf(stream),
  };
}

export type ChaosNats = Awaited<ReturnType<typeof startChaosNats>>;
