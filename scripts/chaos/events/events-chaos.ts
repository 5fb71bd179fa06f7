import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createDatabase, type Database } from '../../../src/db/client.ts';
import type { CheckResult } from '../checks.ts';
import { checkEvents } from './check.ts';
import { EarningsConsumer } from './consumer.ts';
import { deleteStream } from './delete-stream.ts';
import { forgeEvent } from './forge.ts';
import { startChaosNats } from './nats-cluster.ts';
import { hitNatsNode, natsOutage, type NodeTarget } from './node-faults.ts';
import type { EventsStage, ForgeryKind } from './observed.ts';

/*
 * The events part of the chaos run: a three-node JetStream cluster holding the stream at three
 * replicas (nats-cluster.ts), which the run can stop and start whole (fault "nats-outage"), lose
 * one node of (SIGKILL, often the stream's leader: "nats-node-kill"), or have one node come back
 * with its store wiped ("nats-node-wipe") (node-faults.ts); the stream deleted under the relay
 * ("stream-delete", delete-stream.ts) and forged events published on it ("forged-event",
 * forge.ts); the earnings consumer (`npm run consume:earnings`) supervised like the other
 * processes ("consumer-kill", consumer.ts); and the checks made after everything has drained
 * (check.ts; names in checks.ts EVENT_CHECKS).
 */

/**
 * The events part started: nats-server, and the consumer ready to start (startConsumer()) once the
 * workers relay into it (they are given `env`); its faults, its last read after the drain
 * (finish()), its checks (check()) and stop(). `dir` holds the NATS store and the logs (a temp
 * dir, removed by stop(), when not given); `env` is the consumer's environment before
 * DATABASE_URL and the events settings (process.env by default; the chaos run passes the workers'
 * own, so both compute the same stream configuration).
 */
export async function startEventsChaos(o: {
  databaseUrl: string;
  root: string;
  dir?: string;
  env?: NodeJS.ProcessEnv;
  group?: string;
  log?: (l: string) => void;
}) {
  const ownDir = o.dir === undefined;
  const dir = o.dir ?? mkdtempSync(path.join(os.tmpdir(), 'chaos-events-'));
  mkdirSync(path.join(dir, 'nats'), { recursive: true });
  const nats = await startChaosNats(path.join(dir, 'nats'));
  // The run's stream settings: the workers' relay and the consumer get the same. Every event on
  // each of the three nodes: any one can be lost, or come back empty.
  const env = {
    NATS_URL: nats.url,
    EVENTS_STREAM: 'CHAOS_EVENTS',
    EVENTS_SUBJECT_PREFIX: 'chaos',
    EVENTS_EARNINGS_GROUP: o.group ?? 'earnings',
    EVENTS_ACK_WAIT_SECONDS: '5',
    EVENTS_REPLICAS: String(nats.size),
  };
  const log = o.log ?? (() => {});
  const { DATABASE_URL: _d, NATS_URL: _n, ...base } = o.env ?? process.env;
  // info: the consumer's "running" line tells a kill mid-stream from one during start-up.
  const consumerEnv: NodeJS.ProcessEnv = { ...base, LOG_LEVEL: 'info', DATABASE_URL: o.databaseUrl, ...env };
  const consumer = new EarningsConsumer(path.join(o.root, 'src/commands/consume-earnings.ts'), consumerEnv, dir);
  let figures: Awaited<ReturnType<typeof checkEvents>>['figures'] | undefined;
  let database: Database | undefined;
  const stage: EventsStage = {
    nats,
    stream: env.EVENTS_STREAM,
    subjectPrefix: env.EVENTS_SUBJECT_PREFIX,
    group: env.EVENTS_EARNINGS_GROUP,
    database: () => (database ??= createDatabase(o.databaseUrl, { max: 2, applicationName: 'chaos-events-faults' })),
    forged: [],
    deletions: [],
  };
  return {
    env,
    nats,
    /** The supervised consumer: its unplanned exits count as crashes in the verdict. */
    consumer: consumer.process,
    get consumerKills() {
      return consumer.kills;
    },
    /** What the last check() counted. */
    get figures() {
      return figures;
    },
    startConsumer: async () => consumer.start(),
    killConsumer: (downMs?: number, readyWaitMs?: number) => consumer.kill(downMs, readyWaitMs),
    natsOutage: (ms: number) => natsOutage(stage, ms),
    killNatsNode: (target: NodeTarget, downMs: number) => hitNatsNode(stage, target, downMs, false),
    wipeNatsNode: (target: NodeTarget) => hitNatsNode(stage, target, 0, true),
    finish: (timeoutMs?: number) => consumer.finish(nats, log, timeoutMs),
    deleteStream: () => deleteStream(stage),
    forgeEvent: (kind: ForgeryKind, pick: number, refusedWithinMs?: number) => forgeEvent(stage, kind, pick, refusedWithinMs),
    /** The consumer's log so far, its last `lines` lines: what a failed expectation shows. */
    consumerLogTail: (lines = 40) => consumer.logTail(lines),
    async check(): Promise<CheckResult[]> {
      const r = await checkEvents(stage, o.databaseUrl);
      figures = r.figures;
      return r.checks;
    },
    /** Everything down: the consumer, nats-server; the temp dir too when this made it. */
    async stop() {
      await consumer.stop().catch(() => undefined);
      await database?.close().catch(() => undefined);
      database = undefined;
      await nats.stop();
      if (ownDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type EventsChaos = Awaited<ReturnType<typeof startEventsChaos>>;
