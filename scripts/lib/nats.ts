import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { guardChild } from '../../src/db/orphan-watchdog.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { freePort } from './processes.ts';

/*
 * The nats-server processes the scripts and the tests start for one run (the bench, the chaos run,
 * the JetStream tests): one server, or a JetStream cluster of N, on 127.0.0.1 and free ports, each
 * node with its store and its log under one folder. A node can be stopped, killed, paused, wiped
 * and started again on the same ports and store: the faults the chaos run and the tests inject.
 * The server is Debian's `nats-server` package; NATS_SERVER_BIN names another binary.
 */

const BIN = process.env.NATS_SERVER_BIN ?? 'nats-server';

/** What every caller says when nats-server is missing (a caller may add what it skips). */
export const NATS_INSTALL_HINT =
  'nats-server not found (Debian/Ubuntu: apt-get install -y nats-server, or set NATS_SERVER_BIN to a nats-server binary)';

/** nats-server's version line, or null when it does not run here. */
export function natsServerVersion(): string | null {
  const r = spawnSync(BIN, ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

export const natsServerAvailable = (): boolean => natsServerVersion() !== null;

/** Polls `probe` (every 100 ms) until it returns a value; throws naming `what` and the last error after `timeoutMs`. */
export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms${last ? ` (last: ${(last as Error).message})` : ''}`);
    await sleep(100);
  }
}

export interface NatsExit {
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** What one node itself holds of a stream (its /jsz): the leader's view of a replica lags a node's loss, the node's own does not. */
export interface ReplicaState {
  lastSeq: number;
  messages: number;
  /** The names of the stream's consumers the node holds. */
  consumers: string[];
}

interface NodeSpec {
  /** The server name (-n): stream and consumer info name their leader by it. */
  name: string;
  port: number;
  storeDir: string;
  logFile: string;
  jetstream: boolean;
  /** The monitoring port, for replicaOf (cluster nodes only). */
  monitorPort?: number;
  cluster?: { name: string; routePort: number; routes: string };
  /** Flags after the launcher's own: a config file (`-c`; nats-server lets flags override it), TLS, users. */
  extraArgs?: readonly string[];
  /** Added to this process's environment (variables a config file reads). */
  env?: Readonly<Record<string, string>>;
  onUnplannedExit?: (exit: NatsExit, lastLines: string[]) => void;
}

/** One nats-server: its ports, store and log, and the process running it now (none while down). */
export class NatsServerProcess {
  private child?: ChildProcess;
  /** Set by stop(): the exit that follows was asked for. */
  private stopping = false;

  constructor(private readonly spec: NodeSpec) {}

  get name(): string {
    return this.spec.name;
  }
  get port(): number {
    return this.spec.port;
  }
  get url(): string {
    return `nats://127.0.0.1:${this.spec.port}`;
  }
  get storeDir(): string {
    return this.spec.storeDir;
  }
  get running(): boolean {
    const c = this.child;
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  }
  get pid(): number | undefined {
    return this.running ? this.child!.pid : undefined;
  }
  /** Whether stop() was called since the last start(): a supervisor must not start it again. */
  get stopAsked(): boolean {
    return this.stopping;
  }

  /** The last lines of the node's log. */
  tail(lines = 6): string[] {
    try {
      return readFileSync(this.spec.logFile, 'utf8').trimEnd().split('\n').slice(-lines);
    } catch {
      return [];
    }
  }

  /** Starts it (unless it runs) on its ports with its store, and waits until it listens. */
  async start(): Promise<void> {
    if (this.running) return;
    this.stopping = false;
    const s = this.spec;
    mkdirSync(s.storeDir, { recursive: true });
    const log = openSync(s.logFile, 'a');
    const c = spawn(BIN, this.args(), { stdio: ['ignore', log, log], env: { ...process.env, ...s.env } });
    closeSync(log);
    // Not a node process, so no lifeline: a watchdog stops it if this process dies without doing so.
    if (c.pid !== undefined) guardChild(c.pid);
    this.child = c;
    c.once('exit', (code, signal) => {
      if (this.stopping || this.child !== c) return;
      s.onUnplannedExit?.({ pid: c.pid!, code, signal }, this.tail());
    });
    const deadline = Date.now() + 10_000;
    while (!(await portOpen(s.port))) {
      if (c.exitCode !== null) throw new Error(`nats-server ${s.name} exited at start (code ${c.exitCode}): ${this.tail().join(' / ')}`);
      if (Date.now() > deadline)
        throw new Error(`nats-server ${s.name} did not listen on ${s.port} within 10 s: ${this.tail().join(' / ')}`);
      await sleep(20);
    }
  }

  private args(): string[] {
    const s = this.spec;
    const args = [...(s.jetstream ? ['-js'] : []), '-n', s.name, '-a', '127.0.0.1', '-p', String(s.port), '-sd', s.storeDir];
    if (s.monitorPort !== undefined) args.push('-m', String(s.monitorPort));
    if (s.cluster) {
      const { name, routePort, routes } = s.cluster;
      args.push('--cluster_name', name, '--cluster', `nats://127.0.0.1:${routePort}`, '--routes', routes);
    }
    return [...args, ...(s.extraArgs ?? [])];
  }

  /**
   * Sends `signal` (SIGKILL: no goodbye to the others, nothing flushed) and awaits the exit, with
   * SIGKILL after `graceMs`; the store stays. Null when it was not running.
   */
  async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<NatsExit | null> {
    this.stopping = true;
    const c = this.child;
    const wasRunning = this.running;
    this.child = undefined;
    if (!c || !wasRunning) return null;
    const pid = c.pid!;
    const exited = new Promise<NatsExit>((r) => c.once('exit', (code, sig) => r({ pid, code, signal: sig })));
    c.kill('SIGCONT'); // a paused server would not act on SIGTERM
    c.kill(signal);
    const hard = setTimeout(() => c.kill('SIGKILL'), graceMs);
    const seen = await exited;
    clearTimeout(hard);
    return seen;
  }

  /** SIGSTOP: the server hangs, its connections open and unanswered, until resume() (SIGCONT). */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }
  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** Empties the store (the node must be down): it comes back as from a lost disk. Whether the folder is empty. */
  wipeStore(): boolean {
    if (this.running) throw new Error(`nats-server ${this.name} is running: stop it before wiping its store`);
    rmSync(this.storeDir, { recursive: true, force: true });
    mkdirSync(this.storeDir, { recursive: true });
    return readdirSync(this.storeDir).length === 0;
  }

  /** What this node holds of `stream`; null when it holds no such stream, has no monitoring port or does not answer. */
  async replicaOf(stream: string): Promise<ReplicaState | null> {
    type Jsz = {
      account_details?: {
        stream_detail?: { name: string; state: { messages: number; last_seq: number }; consumer_detail?: { name: string }[] }[];
      }[];
    };
    if (this.spec.monitorPort === undefined) return null;
    try {
      const res = await fetch(`http://127.0.0.1:${this.spec.monitorPort}/jsz?streams=true&consumers=true`, {
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

export interface NatsOptions {
  /** Names the temp folder (`stayhub-<name>-nats-…`) and the cluster. */
  name: string;
  /** A folder of the caller's for the stores (`n1`, …) and logs (`nats-n1.log`, …), kept by destroy(); default: a new temp folder, removed by destroy(). */
  dir?: string;
}

/** The folder the nodes live in, and how to throw it away. */
function nodesFolder(opts: NatsOptions): { dir: string; remove(): void } {
  const owned = opts.dir === undefined;
  const dir = opts.dir ?? mkdtempSync(path.join(os.tmpdir(), `stayhub-${opts.name}-nats-`));
  mkdirSync(dir, { recursive: true });
  return {
    dir,
    remove() {
      if (owned) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Every node SIGKILLed (their data is thrown away: a graceful stop's flush buys nothing), then the
 * folder removed when it is ours.
 */
async function throwAway(nodes: NatsServerProcess[], folder: { remove(): void }): Promise<void> {
  await Promise.all(nodes.map((n) => n.stop('SIGKILL')));
  folder.remove();
}

export interface NatsServer {
  node: NatsServerProcess;
  url: string;
  /** Kills the server and removes its folder (unless the caller gave it). */
  destroy(): Promise<void>;
}

/** One nats-server (`-js` unless `jetstream: false`, as Debian's service runs as installed) on a free port; waits until it listens. */
export async function startNatsServer(
  opts: NatsOptions & { jetstream?: boolean } & Pick<NodeSpec, 'extraArgs' | 'env'>,
): Promise<NatsServer> {
  if (!natsServerAvailable()) throw new Error(NATS_INSTALL_HINT);
  const folder = nodesFolder(opts);
  const node = new NatsServerProcess({
    name: 'n1',
    port: await freePort(),
    storeDir: path.join(folder.dir, 'n1'),
    logFile: path.join(folder.dir, 'nats-n1.log'),
    jetstream: opts.jetstream ?? true,
    extraArgs: opts.extraArgs,
    env: opts.env,
  });
  try {
    await node.start();
  } catch (err) {
    await throwAway([node], folder);
    throw err;
  }
  return { node, url: node.url, destroy: () => throwAway([node], folder) };
}

export interface NatsCluster {
  nodes: readonly NatsServerProcess[];
  /** Every node, comma-separated: a NATS_URL. */
  url: string;
  /** The client's server list (host:port of each node). */
  servers: string[];
  /** Starts every node that is down, on its ports with its store. */
  start(): Promise<void>;
  /** SIGTERMs every node and awaits the exits (the stores stay): each node's exit, null for one that was not running. */
  stop(): Promise<(NatsExit | null)[]>;
  /** Index of the node that leads `stream` (or its durable `consumer`) now; undefined while it has none. */
  leaderOf(jsm: JetStreamManager, stream: string, consumer?: string): Promise<number | undefined>;
  /**
   * Waits until the cluster has a meta leader that knows `replicas` nodes (a stream at `replicas`
   * can be placed: a leader answers before it knows every node, with "no suitable peers for
   * placement"). On a connection of its own, closed again.
   */
  waitForPlacement(replicas: number): Promise<void>;
  /** Kills every node and removes the folder (unless the caller gave it). */
  destroy(): Promise<void>;
}

/**
 * A JetStream cluster of `size` nats-server processes (n1, n2, …) on 127.0.0.1, each with its own
 * client, route and monitoring port and store; `started` below `size` starts only the first nodes
 * (a cluster brought up a node short). Resolves once the started nodes listen. `onUnplannedExit`
 * hears of a node exiting unasked (stop() not called).
 */
export async function startNatsCluster(
  opts: NatsOptions & { size?: number; started?: number; onUnplannedExit?: (node: number, exit: NatsExit, lastLines: string[]) => void },
): Promise<NatsCluster> {
  if (!natsServerAvailable()) throw new Error(NATS_INSTALL_HINT);
  const size = opts.size ?? 3;
  const folder = nodesFolder(opts);
  const ports: { port: number; routePort: number; monitorPort: number }[] = [];
  for (let i = 0; i < size; i++) ports.push({ port: await freePort(), routePort: await freePort(), monitorPort: await freePort() });
  const cluster = {
    name: `stayhub-${opts.name}-${randomUUID().slice(0, 8)}`,
    routes: ports.map((p) => `nats://127.0.0.1:${p.routePort}`).join(','),
  };
  const nodes = ports.map(
    (p, i) =>
      new NatsServerProcess({
        name: `n${i + 1}`,
        port: p.port,
        monitorPort: p.monitorPort,
        storeDir: path.join(folder.dir, `n${i + 1}`),
        logFile: path.join(folder.dir, `nats-n${i + 1}.log`),
        jetstream: true,
        cluster: { ...cluster, routePort: p.routePort },
        onUnplannedExit: opts.onUnplannedExit && ((exit, lastLines) => opts.onUnplannedExit!(i, exit, lastLines)),
      }),
  );
  try {
    await Promise.all(nodes.slice(0, opts.started ?? size).map((n) => n.start()));
  } catch (err) {
    await throwAway(nodes, folder);
    throw err;
  }
  const servers = nodes.map((n) => `127.0.0.1:${n.port}`);
  return {
    nodes,
    url: nodes.map((n) => n.url).join(','),
    servers,
    start: async () => void (await Promise.all(nodes.map((n) => n.start()))),
    stop: () => Promise.all(nodes.map((n) => n.stop('SIGTERM'))),
    async leaderOf(jsm, stream, consumer) {
      const info = consumer === undefined ? await jsm.streams.info(stream) : await jsm.consumers.info(stream, consumer);
      const i = nodes.findIndex((n) => n.name === info.cluster?.leader);
      return i >= 0 ? i : undefined;
    },
    async waitForPlacement(replicas) {
      const nc = await connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      try {
        // The JetStream API answers only once the nodes have elected a meta leader.
        const jsm = await until('a JetStream meta leader', 30_000, async () => {
          const m = await jetstreamManager(nc, { timeout: 2_000 });
          await m.getAccountInfo();
          return m;
        });
        await until(`a stream placed on ${replicas} nodes`, 30_000, () => placedOnAll(jsm, replicas));
      } finally {
        await nc.close();
      }
    },
    destroy: () => throwAway(nodes, folder),
  };
}

/** Whether a stream at `replicas` can be placed now (one is created in memory and removed), else throws why. */
export async function placedOnAll(jsm: JetStreamManager, replicas: number): Promise<true> {
  const name = `PLACEMENT_${randomUUID().slice(0, 8)}`;
  await jsm.streams.add({ name, subjects: [`placement.${name}`], num_replicas: replicas, storage: StorageType.Memory });
  await jsm.streams.delete(name);
  return true;
}
