import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { createDatabase } from '../../src/db/client.ts';
import { ledgerDifferences } from '../../src/events/earnings/ledger.ts';
import { freePort } from '../../src/net/free-port.ts';

/*
 * The events part of the chaos run (issue 11, item 6): a nats-server the run can stop and start
 * (fault "nats-outage"), and the two invariants checked after everything has drained:
 *
 *   events-exactly-once   every committed booking event (outbox row of booking.*) is in the
 *                         stream exactly once by Nats-Msg-Id, and the stream holds nothing else
 *                         under booking.*
 *   earnings-ledger       the earnings ledger of the group equals what SQL computes from the
 *                         bookings table (confirmed bookings' totals per host and currency)
 *
 * Shape of the results: the same {name, ok, violations, violationCount} as checks.ts.
 */

export interface EventsCheckResult {
  name: string;
  ok: boolean;
  violations: string[];
  violationCount: number;
}

export interface ChaosNats {
  url: string;
  /** SIGTERM; the store directory survives. */
  stop(): Promise<void>;
  /** Same port, same store. */
  start(): Promise<void>;
  readonly running: boolean;
}

/** Starts nats-server -js on a free port with its store under `dir` (a fresh temp dir by default). */
export async function startChaosNats(dir = mkdtempSync(path.join(os.tmpdir(), 'chaos-nats-'))): Promise<ChaosNats> {
  if (spawnSync('nats-server', ['--version']).status !== 0) {
    throw new Error('nats-server not found: the events part of the chaos run needs it (Debian: apt-get install -y nats-server)');
  }
  const port = await freePort();
  let child: ChildProcess | undefined;
  const listening = () =>
    new Promise<boolean>((r) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), r(true)));
      s.once('error', () => r(false));
    });
  const nats: ChaosNats = {
    url: `nats://127.0.0.1:${port}`,
    get running() {
      return child !== undefined && child.exitCode === null;
    },
    async start() {
      child = spawn('nats-server', ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir], { stdio: 'ignore' });
      for (let i = 0; !(await listening()); i++) {
        if (i > 500) throw new Error(`nats-server did not listen on ${port}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    async stop() {
      const c = child;
      child = undefined;
      if (!c || c.exitCode !== null) return;
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGTERM');
      await exited;
    },
  };
  await nats.start();
  return nats;
}

/** Message id → how many times it is in the stream, for subjects under `filter`. Ordered consumer: one pass, no acks. */
async function countStream(natsUrl: string, stream: string, filter: string): Promise<Map<string, number>> {
  const nc = await connect({ servers: natsUrl.replace('nats://', '') });
  const counts = new Map<string, number>();
  try {
    const info = await (await jetstreamManager(nc)).streams.info(stream);
    if (info.state.messages === 0) return counts;
    // Unfiltered (a filtered ordered consumer needs nats-server 2.10), filtered here.
    const prefix = filter.replace(/>$/, '');
    const consumer = await jetstream(nc).consumers.get(stream);
    const messages = await consumer.consume({ max_messages: 1000 });
    for await (const m of messages) {
      if (!m.subject.startsWith(prefix)) {
        if (m.info.pending === 0) break;
        continue;
      }
      const id = m.headers?.get('Nats-Msg-Id') ?? `(no id, seq ${m.seq})`;
      counts.set(id, (counts.get(id) ?? 0) + 1);
      if (m.info.pending === 0) break;
    }
    messages.stop();
  } finally {
    await nc.close();
  }
  return counts;
}

export async function checkEvents(o: {
  databaseUrl: string;
  natsUrl: string;
  stream: string;
  subjectPrefix: string;
  group: string;
}): Promise<EventsCheckResult[]> {
  const database = createDatabase(o.databaseUrl, { max: 2, applicationName: 'chaos-events-check' });
  try {
    const { rows } = await database.db.execute<{ public_id: string; status: string }>(
      sql`select public_id, status from outbox where topic in ('booking.created', 'booking.cancelled')`,
    );
    const inStream = await countStream(o.natsUrl, o.stream, `${o.subjectPrefix}.booking.>`);
    const violations: string[] = [];
    const committed = new Set(rows.map((r) => r.public_id));
    for (const r of rows) {
      const n = inStream.get(r.public_id) ?? 0;
      if (n !== 1) violations.push(`${r.public_id} (outbox ${r.status}) is in the stream ${n} time(s)`);
    }
    for (const [id, n] of inStream) if (!committed.has(id)) violations.push(`${id} is in the stream ${n} time(s) but in no committed outbox row`);

    const ledger = await ledgerDifferences(database.db, o.group);
    const ledgerViolations = ledger.map((d) => `host ${d.hostId} ${d.currency}: ledger ${d.ledger}, bookings table ${d.truth}`);
    return [
      { name: 'events-exactly-once', ok: violations.length === 0, violations: violations.slice(0, 10), violationCount: violations.length },
      { name: 'earnings-ledger', ok: ledger.length === 0, violations: ledgerViolations.slice(0, 10), violationCount: ledger.length },
    ];
  } finally {
    await database.close();
  }
}

/**
 * Everything run.ts needs for the events, behind a few calls:
 *
 *   const events = await startEventsChaos({ databaseUrl, root });
 *   // workers: spawn them with { ...env, ...events.env } so they relay into this NATS
 *   await events.startConsumer();                       // npm run consume:earnings, supervised
 *   faults: events.killConsumer()  ·  events.natsOutage(ms)
 *   after the drain: await events.finish(); results.push(...await events.check());
 */
export async function startEventsChaos(o: { databaseUrl: string; root: string; group?: string; log?: (l: string) => void }) {
  const nats = await startChaosNats();
  const stream = 'CHAOS_EVENTS';
  const subjectPrefix = 'chaos';
  const group = o.group ?? 'earnings';
  const env: Record<string, string> = {
    NATS_URL: nats.url,
    EVENTS_STREAM: stream,
    EVENTS_SUBJECT_PREFIX: subjectPrefix,
    EVENTS_EARNINGS_GROUP: group,
    EVENTS_ACK_WAIT_SECONDS: '5',
  };
  const log = o.log ?? (() => {});
  let consumer: ChildProcess | undefined;
  let supervising = false;
  let kills = 0;
  const spawnConsumer = (args: string[] = []) =>
    spawn(process.execPath, ['--import', 'tsx', 'scripts/consume-earnings.ts', ...args], {
      cwd: o.root,
      env: { ...process.env, DATABASE_URL: o.databaseUrl, LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  const supervise = () => {
    consumer = spawnConsumer();
    consumer.once('exit', (code, signal) => {
      if (!supervising) return;
      log(`earnings consumer exited (${signal ?? code}); restarting`);
      setTimeout(supervise, 500);
    });
  };
  return {
    env,
    nats,
    get consumerKills() {
      return kills;
    },
    async startConsumer() {
      supervising = true;
      supervise();
    },
    /** SIGKILL: whatever it was applying rolls back and comes back after the ack wait. */
    killConsumer() {
      kills++;
      consumer?.kill('SIGKILL');
    },
    /** nats-server down for `ms`, then back on the same store. */
    async natsOutage(ms: number) {
      await nats.stop();
      await new Promise((r) => setTimeout(r, ms));
      await nats.start();
    },
    /** Stops the supervised consumer, then runs one to the end of the stream (--until-empty). */
    async finish() {
      supervising = false;
      if (consumer && consumer.exitCode === null && consumer.signalCode === null) {
        const exited = new Promise((r) => consumer!.once('exit', r));
        consumer.kill('SIGTERM');
        await exited;
      }
      if (!nats.running) await nats.start();
      const last = spawnConsumer(['--until-empty']);
      const code = await new Promise<number | null>((r) => last.once('exit', (c) => r(c)));
      if (code !== 0) throw new Error(`consume:earnings --until-empty exited ${code}`);
    },
    check: () => checkEvents({ databaseUrl: o.databaseUrl, natsUrl: nats.url, stream, subjectPrefix, group }),
    async stop() {
      supervising = false;
      consumer?.kill('SIGKILL');
      await nats.stop();
    },
  };
}
