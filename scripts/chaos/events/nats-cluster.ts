import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { guardChild } from '../../../src/db/orphan-watchdog.ts';
import { freePort } from '../../../src/net/free-port.ts';
import { portOpen } from '../../../src/net/port-open.ts';
import type { ExitObserved } from '../processes.ts';

/*
 * The chaos run's own JetStream cluster: nats-server processes on 127.0.0.1, free ports, stores
 * under the run's folder, that the events faults stop whole, kill one node of, or wipe one
 * node's store of.
 */

/** Whether `nats-server` runs here (the events part needs it). */
export function natsServerAvailable(): boolean {
  return spawnSync('nats-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

export const NATS_INSTALL_HINT =
  'nats-server not found: the events part of the chaos run needs it (Debian: apt-get install -y nats-server)';

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

type UnplannedExits = ChaosNats['unplannedExits'];

/** One nats-server of the cluster: its ports, store and log, and the process running it. */
class NatsNode {
  child?: ChildProcess;
  stopping = false;

  constructor(
    readonly name: string,
    readonly port: number,
    private readonly routePort: number,
    private readonly monitorPort: number,
    private readonly store: string,
    private readonly logFile: string,
    private readonly cluster: { name: string; routes: string; unplannedExits: UnplannedExits },
  ) {}

  get alive(): boolean {
    const c = this.child;
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  }

  get pid(): number | undefined {
    return this.alive ? this.child!.pid : undefined;
  }

  private tail(): string[] {
    try {
      return readFileSync(this.logFile, 'utf8').trimEnd().split('\n').slice(-6);
    } catch {
      return [];
    }
  }

  /** Starts it on its ports with its store, and waits until it listens. */
  async start(): Promise<void> {
    if (this.alive) return;
    this.stopping = false;
    mkdirSync(this.store, { recursive: true });
    const out = openSync(this.logFile, 'a');
    const args = ['-js', '-n', this.name, '-a', '127.0.0.1', '-p', String(this.port), '-m', String(this.monitorPort), '-sd', this.store];
    const c = spawn(
      'nats-server',
      [...args, '--cluster_name', this.cluster.name, '--cluster', `nats://127.0.0.1:${this.routePort}`, '--routes', this.cluster.routes],
      { stdio: ['ignore', out, out] },
    );
    closeSync(out);
    // Not a node process, so no lifeline: a watchdog stops it if the run dies without doing so.
    if (c.pid !== undefined) guardChild(c.pid);
    this.child = c;
    c.once('exit', (code, signal) => {
      if (this.stopping || this.child !== c) return;
      this.cluster.unplannedExits.push({ at: Date.now(), code, signal, lastLines: [`${this.name}:`, ...this.tail()] });
      setTimeout(() => void (!this.stopping && !this.alive && this.start().catch(() => undefined)), 500);
    });
    for (let k = 0; !(await portOpen(this.port)); k++) {
      if (c.exitCode !== null) throw new Error(`nats-server ${this.name} exited at start (code ${c.exitCode}): ${this.tail().join(' / ')}`);
      if (k > 500) throw new Error(`nats-server ${this.name} did not listen on ${this.port}`);
      await sleep(20);
    }
  }

  /** Sends `signal` and awaits the exit (SIGKILL after 10 s); null when it was not running. */
  async stop(signal: NodeJS.Signals): Promise<ExitObserved | null> {
    this.stopping = true;
    const c = this.child;
    const wasAlive = this.alive;
    this.child = undefined;
    if (!c || !wasAlive) return null;
    const pid = c.pid!;
    const exited = new Promise<ExitObserved>((r) => c.once('exit', (code, sig) => r({ pid, code, signal: sig })));
    c.kill(signal);
    const hard = setTimeout(() => c.kill('SIGKILL'), 10_000);
    const seen = await exited;
    clearTimeout(hard);
    return seen;
  }

  wipeStore(): boolean {
    if (this.alive) throw new Error(`nats-server ${this.name} is running: stop it before wiping its store`);
    rmSync(this.store, { recursive: true, force: true });
    mkdirSync(this.store, { recursive: true });
    return readdirSync(this.store).length === 0;
  }

  async replicaOf(stream: string): Promise<{ lastSeq: number; messages: number; consumers: string[] } | null> {
    type Jsz = {
      account_details?: {
        stream_detail?: { name: string; state: { messages: number; last_seq: number }; consumer_detail?: { name: string }[] }[];
      }[];
    };
    try {
      const res = await fetch(`http://127.0.0.1:${this.monitorPort}/jsz?streams=true&consumers=true`, {
        signal: AbortSignal.timeout(2_000),
      });
      const jsz = (await res.json()) as Jsz;
      const s = (jsz.account_details ?? []).flatMap((a) => a.stream_detail ?? []).find((d) => d.name === stream);
      if (!s) return null;
      return { lastSeq: s.state.last_seq, messages: s.state.messages, consumers: (s.consumer_detail ?? []).map((c) => c.name) };
    } catch {
      return null;
    }
  }
}

/**
 * Starts a JetStream cluster of `size` nats-server processes on 127.0.0.1 (free client and route
 * ports), node i's store under `dir`/n<i> and its log in `dir`/nats-n<i>.log, and waits until each
 * listens. A node that exits unasked is started again after half a second.
 */
export async function startChaosNats(dir = mkdtempSync(path.join(os.tmpdir(), 'chaos-nats-')), size = 3): Promise<ChaosNats> {
  if (!natsServerAvailable()) throw new Error(NATS_INSTALL_HINT);
  const ports: { port: number; routePort: number; monitorPort: number }[] = [];
  for (let i = 0; i < size; i++) ports.push({ port: await freePort(), routePort: await freePort(), monitorPort: await freePort() });
  const cluster = {
    name: `chaos-${randomUUID().slice(0, 8)}`,
    routes: ports.map((p) => `nats://127.0.0.1:${p.routePort}`).join(','),
    unplannedExits: [] as UnplannedExits,
  };
  const nodes = ports.map(
    (p, i) =>
      new NatsNode(
        `n${i + 1}`,
        p.port,
        p.routePort,
        p.monitorPort,
        path.join(dir, `n${i + 1}`),
        path.join(dir, `nats-n${i + 1}.log`),
        cluster,
      ),
  );
  const nats: ChaosNats = {
    url: nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(','),
    servers: nodes.map((n) => `127.0.0.1:${n.port}`),
    size,
    get pid() {
      return nodes[0]!.pid;
    },
    get running() {
      return nodes.every((n) => n.alive);
    },
    unplannedExits: cluster.unplannedExits,
    accepting: async () => (await Promise.all(nodes.map((n) => portOpen(n.port)))).some(Boolean),
    async start() {
      await Promise.all(nodes.map((n) => n.start()));
    },
    async stop() {
      const seen = await Promise.all(nodes.map((n) => n.stop('SIGTERM')));
      return seen.every((e) => e !== null) ? seen[0]! : null;
    },
    node: (i) => ({ name: nodes[i]!.name, pid: nodes[i]!.pid }),
    killNode: (i) => nodes[i]!.stop('SIGKILL'),
    startNode: (i) => nodes[i]!.start(),
    wipeStore: (i) => nodes[i]!.wipeStore(),
    replicaOf: (i, stream) => nodes[i]!.replicaOf(stream),
  };
  await nats.start();
  return nats;
}
