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

export interface ChaosNats {
  /** Every node, comma-separated: the processes' NATS_URL. */
  url: string;
  /** The client's server list (host:port of each node). */
  servers: string[];
  /** How many nodes. */
  size: number;
  /** The first node's pid (undefined while it is down). */
  readonly pid: number | undefined;
  /** Every node SIGTERMed, their exits awaited (the stores survive): the first node's exit, null when any was not running. */
  stop(): Promise<ExitObserved | null>;
  /** Every node, same ports, same stores. */
  start(): Promise<void>;
  /** Whether any node's port accepts a TCP connection right now. */
  accepting(): Promise<boolean>;
  /** Every node is running. */
  readonly running: boolean;
  /** Exits the run did not cause, any node's; the node is started again, as a process manager would. */
  readonly unplannedExits: { at: number; code: number | null; signal: string | null; lastLines: string[] }[];
  /** Index of the node that leads `stream` (or its durable `consumer`) now; undefined while it has none. */
  leaderOf: NatsCluster['leaderOf'];
  /** Node `i`: its server name (as stream info names its leader) and pid. */
  node(i: number): { name: string; pid: number | undefined };
  /** SIGKILL node `i` and await its exit; null when it was not running. The store stays. */
  killNode(i: number): Promise<ExitObserved | null>;
  /** Starts node `i` on its ports with its store. */
  startNode(i: number): Promise<void>;
  /** Removes node `i`'s store (the node must be down): it comes back empty. Whether the folder was emptied. */
  wipeStore(i: number): boolean;
  /**
   * What node `i` itself holds of `stream` (its monitoring endpoint, /jsz): its last sequence and
   * its consumers' names; null when it holds no such stream or does not answer. The leader's view
   * of a replica ("current") lags a node's loss by seconds; the node's own does not.
   */
  replicaOf(i: number, stream: string): Promise<{ lastSeq: number; messages: number; consumers: string[] } | null>;
}

/**
 * Starts a JetStream cluster of `size` nodes, node i's store under `dir`/n<i> and its log in
 * `dir`/nats-n<i>.log, and waits until each listens. A node that exits unasked is started again
 * after half a second.
 */
export async function startChaosNats(dir = mkdtempSync(path.join(os.tmpdir(), 'chaos-nats-')), size = 3): Promise<ChaosNats> {
  const unplannedExits: ChaosNats['unplannedExits'] = [];
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
    url: cluster.url,
    servers: cluster.servers,
    size,
    get pid() {
      return nodes[0]!.pid;
    },
    get running() {
      return nodes.every((n) => n.running);
    },
    unplannedExits,
    accepting: async () => (await Promise.all(nodes.map((n) => portOpen(n.port)))).some(Boolean),
    start: () => cluster.start(),
    async stop() {
      const seen = await cluster.stop();
      return seen.every((e) => e !== null) ? seen[0]! : null;
    },
    leaderOf: (jsm, stream, consumer) => cluster.leaderOf(jsm, stream, consumer),
    node: (i) => ({ name: nodes[i]!.name, pid: nodes[i]!.pid }),
    killNode: (i) => nodes[i]!.stop('SIGKILL'),
    startNode: (i) => nodes[i]!.start(),
    wipeStore: (i) => nodes[i]!.wipeStore(),
    replicaOf: (i, stream) => nodes[i]!.replicaOf(stream),
  };
}
