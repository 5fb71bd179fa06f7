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
    /** Every node, comma-separated: the processes' NATS_URL; and the client's server list (host:port of each). */
    url: cluster.url,
    servers: cluster.servers,
    size,
    /**
     * Each node (scripts/lib/nats.ts): its server name (as stream info names its leader), pid, stop
     * (SIGKILL: the store stays), start, wipeStore (while down: it comes back empty), and replicaOf:
     * what it itself holds of a stream (its /jsz). The leader's view of a replica ("current") lags a
     * node's loss by seconds; the node's own does not.
     */
    nodes,
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
  };
}

export type ChaosNats = Awaited<ReturnType<typeof startChaosNats>>;
