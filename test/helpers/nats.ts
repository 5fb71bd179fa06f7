import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll } from 'vitest';
import type { ConsumedEvent } from '../../src/events/event.ts';
import { guardChild } from '../../src/db/orphan-watchdog.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { inCI, recordSkip } from './tools.ts';

/*
 * A real `nats-server -js` per test file: its own free port and its own store directory, so files
 * run in parallel and a file can stop and restart "its" server on the same port and store.
 *
 * nats-server is a Debian package (`apt-get install -y nats-server`; .ci/run installs it). Where it
 * is missing these tests skip and say so (and the run's last lines say it again); under CI=1 or
 * CI=true a missing binary fails instead, so CI can never go green by skipping them.
 */

const BIN = process.env.NATS_SERVER_BIN ?? 'nats-server';
export const hasNatsServer = spawnSync(BIN, ['--version']).status === 0;
export const NATS_MISSING =
  'nats-server not found: these tests need a real NATS JetStream server (Debian: `apt-get install -y nats-server`, ' +
  'or set NATS_SERVER_BIN to a nats-server binary)';

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
  const port = await freePort();
  const storeDir = mkdtempSync(path.join(os.tmpdir(), 'stayhub-nats-'));
  let child: ChildProcess | undefined;
  let output = '';

  const start = async () => {
    output = '';
    const js = opts.jetstream === false ? [] : ['-js'];
    child = spawn(BIN, [...js, '-a', '127.0.0.1', '-p', String(port), '-sd', storeDir], { stdio: ['ignore', 'pipe', 'pipe'] });
    // Not a node process: if the test process dies without stopping it, a watchdog does.
    if (child.pid !== undefined) guardChild(child.pid);
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const until = Date.now() + 10_000;
    while (!(await portOpen(port))) {
      if (child.exitCode !== null) throw new Error(`nats-server exited at start (${child.exitCode}): ${output}`);
      if (Date.now() > until) throw new Error(`nats-server did not listen on ${port} within 10 s: ${output}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const stop = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGCONT'); // a paused server would not act on SIGTERM
    c.kill('SIGTERM');
    const t = setTimeout(() => c.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
  };

  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    stop,
    start,
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    async destroy() {
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
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
  const nc = await connect({ servers: url.replace('nats://', '') });
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

/**
 * A TCP proxy in front of a NATS server that delays everything the server sends by `delayMs`:
 * every PubAck arrives that much later, so publishes made one at a time take delayMs each, and
 * pipelined ones share the wait.
 */
export async function slowProxy(targetPort: number, delayMs: number): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('data', (d) => upstream.write(d));
    upstream.on('data', (d) => setTimeout(() => client.writable && client.write(d), delayMs));
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    url: `nats://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
