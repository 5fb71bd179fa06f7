import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { JetStreamManager, StreamConfig, StreamInfo } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll } from 'vitest';
import {
  NATS_INSTALL_HINT,
  natsServerAvailable,
  startNatsCluster as startClusterProcesses,
  startNatsServer,
  until,
} from '../../scripts/lib/nats.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import type { ConsumedEvent } from '../../src/events/event.ts';
import type { OutgoingEvent } from '../../src/events/publisher.ts';
import { inCI, recordSkip } from './tools.ts';

export { placedOnAll } from '../../scripts/lib/nats.ts';

/*
 * A real `nats-server -js` per test file (started by scripts/lib/nats.ts): its own free port and
 * its own store directory, so files run in parallel and a file can stop and restart "its" server
 * on the same port and store.
 *
 * nats-server is a Debian package (`apt-get install -y nats-server`; .ci/run installs it). Where it
 * is missing these tests skip and say so (and the run's last lines say it again); under CI=1 or
 * CI=true a missing binary fails instead, so CI can never go green by skipping them.
 */

export const hasNatsServer = natsServerAvailable();
export const NATS_MISSING = `${NATS_INSTALL_HINT}: these tests need a real NATS JetStream server`;

/**
 * Call at the top of a test file; returns true when the file's tests must skip, and then records
 * why for the summary at the end of the run (test/helpers/skip-summary.ts).
 */
export function skipWithoutNats(): boolean {
  if (hasNatsServer) return false;
  if (inCI) throw new Error(`${NATS_MISSING}. CI=${process.env.CI}: refusing to skip.`);
  console.warn(`SKIPPED: ${NATS_MISSING}`);
  recordSkip(NATS_MISSING);
  return true;
}

export interface NatsServer {
  url: string;
  port: number;
  storeDir: string;
  /** SIGTERM and wait for exit (the store survives). */
  stop(): Promise<void>;
  /** Starts again on the same port with the same store. */
  start(): Promise<void>;
  /** SIGSTOP: the server hangs, its connections open and unanswered, until resume() (SIGCONT). */
  pause(): void;
  resume(): void;
  /** Stops and removes the store. */
  destroy(): Promise<void>;
}

/** `jetstream: false` starts a plain server, as Debian's nats-server service runs as installed. */
export async function startNats(opts: { jetstream?: boolean } = {}): Promise<NatsServer> {
  const server = await startNatsServer({ name: 'test', jetstream: opts.jetstream });
  const { node } = server;
  return {
    url: server.url,
    port: node.port,
    storeDir: node.storeDir,
    stop: async () => void (await node.stop('SIGTERM', 5_000)),
    start: () => node.start(),
    pause: () => node.pause(),
    resume: () => node.resume(),
    destroy: () => server.destroy(),
  };
}

export interface NatsFixture extends NatsServer {
  /** The test's own connection to the server (with `{ client: true }`). */
  nc: NatsConnection;
  jsm: JetStreamManager;
}

/**
 * The test file's nats-server: started before its tests (the object returned is filled in then)
 * and destroyed after them, or never when `skip` (skipWithoutNats). With `{ client: true }`, also
 * a connection of the test's own and its JetStream manager, closed before the server stops.
 */
export function useNats(skip: boolean, opts: { client?: boolean } = {}): NatsFixture {
  const nats = {} as NatsFixture;
  beforeAll(async () => {
    if (skip) return;
    const server = await startNats();
    if (!opts.client) return void Object.assign(nats, server);
    const { connect } = await import('@nats-io/transport-node');
    const { jetstreamManager } = await import('@nats-io/jetstream');
    const nc = await connect({ servers: server.url.replace('nats://', '') });
    Object.assign(nats, server, { nc, jsm: await jetstreamManager(nc) });
  });
  afterAll(async () => {
    await nats.nc?.close();
    await nats.destroy?.();
  });
  return nats;
}

/** A stream name no other test uses (`letter` and six random characters), for a test that relays into a stream of its own. */
export const freshStream = (letter: string) => `${letter}${Math.random().toString(36).slice(2, 8).toUpperCase()}`;

/**
 * The settings of a worker or a consumer on `stream`, whose subjects are prefixed with its name in
 * lower case: quick polling, backoff without jitter, warn logs, a mail folder of its own; then `extra`.
 */
export function eventsEnv(
  databaseUrl: string,
  natsUrl: string,
  stream: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    NATS_URL: natsUrl,
    EVENTS_STREAM: stream,
    EVENTS_SUBJECT_PREFIX: stream.toLowerCase(),
    LOG_LEVEL: 'warn',
    BACKOFF_JITTER: 'false',
    POLL_INTERVAL_MS: '50',
    MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
    ...extra,
  };
}

/** A relay's configuration on `stream` of the server at `natsUrl`, with no database behind it: for a publisher alone. */
export const publisherConfig = (natsUrl: string, stream: string, extra: Record<string, string> = {}): Config =>
  loadConfig(eventsEnv('postgres://unused@127.0.0.1:1/unused', natsUrl, stream, extra));

/** The n-th booking.created event a relay on `stream` would publish: for a test that drives a publisher itself. */
export const outgoingEvent = (stream: string, n = 1): OutgoingEvent => ({
  subject: `${stream.toLowerCase()}.booking.created`,
  messageId: `${stream}-${n}`,
  topic: 'booking.created',
  key: `k-${n}`,
  occurredAt: new Date(),
  schemaVersion: 1,
  body: { n },
});

/**
 * An event as a consumer hands it to its effect, under a message id of its own (the inbox cannot
 * tell two of them apart): for a test that applies events without a stream.
 */
export const consumedEvent = (topic: string, body: unknown): ConsumedEvent => ({
  messageId: randomUUID(),
  subject: `stayhub.${topic}`,
  topic,
  key: null,
  occurredAt: null,
  schemaVersion: 1,
  streamSeq: null,
  deliveries: 1,
  headers: {},
  body,
});

export interface StoredEvent {
  seq: number;
  subject: string;
  msgId: string | undefined;
  headers: Record<string, string>;
  body: unknown;
}

/** Every message in the stream, in stream order (direct reads by sequence: fine for test-sized streams). */
export async function readStream(url: string, stream: string): Promise<StoredEvent[]> {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstreamManager } = await import('@nats-io/jetstream');
  // One server, or a cluster's, comma-separated.
  const nc = await connect({ servers: url.split(',').map((u) => u.replace('nats://', '')) });
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(stream);
    const out: StoredEvent[] = [];
    if (info.state.messages === 0) return out;
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq });
      if (!m) continue;
      const headers: Record<string, string> = {};
      for (const [k, v] of m.header ?? []) headers[k] = v[0]!;
      out.push({
        seq: m.seq,
        subject: m.subject,
        msgId: headers['Nats-Msg-Id'],
        headers,
        body: JSON.parse(new TextDecoder().decode(m.data)),
      });
    }
    return out;
  } finally {
    await nc.close();
  }
}

type StreamConfigWithName = Partial<StreamConfig> & { name: string };

/** One node of a test cluster. */
export interface NatsNode {
  /** Its server name: stream info names the leader by it. */
  name: string;
  port: number;
  url: string;
  storeDir: string;
  running(): boolean;
}

export interface NatsCluster {
  nodes: NatsNode[];
  /** Every node, comma-separated: a NATS_URL. */
  url: string;
  /** The test's own connection (every node in its server list) and JetStream manager. */
  nc: NatsConnection;
  jsm: JetStreamManager;
  /** SIGKILL: no goodbye to the others, nothing flushed. The store stays. */
  kill(i: number): Promise<void>;
  /** Starts a killed node again on its ports with its store. */
  start(i: number): Promise<void>;
  /** Kills the node, removes its store, starts it empty: a node that comes back from a lost disk. */
  wipe(i: number): Promise<void>;
  /** Index of the node that leads `stream` now (waits through an election). */
  streamLeader(stream: string): Promise<number>;
  /** Index of the node that leads the durable consumer `consumer` of `stream` now. */
  consumerLeader(stream: string, consumer: string): Promise<number>;
  /** What node `i` itself holds of `stream` (its /jsz); null: no such stream there, or no answer. */
  replicaOf(i: number, stream: string): Promise<{ lastSeq: number; messages: number } | null>;
  /**
   * Waits until `stream` has a leader and every running node holds it up to the leader's last
   * sequence, asked of each node (the leader's own view of a replica lags a node's loss).
   */
  waitForStream(stream: string, timeoutMs?: number): Promise<StreamInfo>;
  /** Kills every node and removes the stores. */
  destroy(): Promise<void>;
}

/**
 * Three (or `size`) nats-server processes as one JetStream cluster on 127.0.0.1, each with its
 * own client port, route port and store. Returns once the cluster has a meta leader that knows
 * every node (a stream at `size` replicas can be placed) and, with `stream`, once that stream
 * exists at `num_replicas` with a leader and every replica current. `started` below `size` starts
 * only the first nodes (the others with start(i)): a cluster brought up a node short.
 */
export async function startNatsCluster(
  opts: { size?: number; stream?: StreamConfigWithName; started?: number } = {},
): Promise<NatsCluster> {
  const size = opts.size ?? 3;
  const started = opts.started ?? size;
  const cluster = await startClusterProcesses({ name: 'test', size, started });
  const { nodes } = cluster;
  await cluster.waitForPlacement(started);
  const { connect } = await import('@nats-io/transport-node');
  const { jetstreamManager } = await import('@nats-io/jetstream');
  const nc = await connect({ servers: cluster.servers, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  const jsm = await jetstreamManager(nc, { timeout: 2_000 });

  const replicaOf = async (i: number, stream: string) => {
    const r = await nodes[i]!.replicaOf(stream);
    return r && { lastSeq: r.lastSeq, messages: r.messages };
  };

  // A node back from a wiped store catches up at NATS's own pace: 0.6 to 10.5 s here on a quiet
  // machine, more than 20 s with the suite beside it. What the tests judge is that it gets there.
  const waitForStream = (stream: string, timeoutMs = 60_000) =>
    until(`stream ${stream} led, every running node holding it to the leader's last sequence`, timeoutMs, async () => {
      const info = await jsm.streams.info(stream);
      if (!info.cluster?.leader) return undefined;
      for (const [i, node] of nodes.entries()) {
        if (!node.running) continue;
        const mine = await replicaOf(i, stream);
        if (!mine || mine.lastSeq < info.state.last_seq) return undefined;
      }
      return info;
    });

  if (opts.stream) {
    await until(`stream ${opts.stream.name} created`, 20_000, async () => {
      try {
        await jsm.streams.add(opts.stream!);
      } catch (err) {
        // Created by an earlier try whose answer was lost in the election: fine if it is there.
        if (!(await jsm.streams.info(opts.stream!.name).catch(() => undefined))) throw err;
      }
      return true;
    });
    const info = await waitForStream(opts.stream.name);
    if (info.config.num_replicas !== (opts.stream.num_replicas ?? 1)) {
      throw new Error(`stream ${opts.stream.name} has ${info.config.num_replicas} replicas, not ${opts.stream.num_replicas}`);
    }
  }

  const kill = async (i: number) => void (await nodes[i]!.stop('SIGKILL'));
  const start = (i: number) => nodes[i]!.start();
  return {
    nodes: nodes.map((n) => ({ name: n.name, port: n.port, url: n.url, storeDir: n.storeDir, running: () => n.running })),
    url: cluster.url,
    nc,
    jsm,
    kill,
    start,
    async wipe(i) {
      await kill(i);
      nodes[i]!.wipeStore();
      await start(i);
    },
    streamLeader: (stream) => until(`a leader for stream ${stream}`, 20_000, () => cluster.leaderOf(jsm, stream)),
    consumerLeader: (stream, consumer) =>
      until(`a leader for consumer ${consumer} of ${stream}`, 20_000, () => cluster.leaderOf(jsm, stream, consumer)),
    replicaOf,
    waitForStream,
    async destroy() {
      await nc.close().catch(() => undefined);
      await cluster.destroy();
    },
  };
}
