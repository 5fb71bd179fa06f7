import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { createDatabase } from '../../src/db/client.ts';
import { countOpenDeadLetters, openDeadLetters } from '../../src/events/dead-letters.ts';
import { ledgerDifferences } from '../../src/events/earnings/ledger.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { Supervised, type ExitObserved } from './processes.ts';
import { EVENT_CHECKS, type CheckResult } from './verdict.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * The events part of the chaos run: a nats-server the run can stop and start (fault
 * "nats-outage"), the earnings consumer (`npm run consume:earnings`) supervised like the other
 * processes (fault "consumer-kill"), and the three invariants checked after everything has
 * drained (names in verdict.ts EVENT_CHECKS):
 *
 *   exactly once   every committed booking event (outbox row of booking.*) is in the stream
 *                  exactly once by Nats-Msg-Id, and the stream holds nothing else under booking.*
 *   ledger         the earnings ledger of the group equals what SQL computes from the bookings
 *                  table (confirmed bookings' totals per host and currency)
 *   dead letters   the group has no open consumer dead letter: every event of the run is one the
 *                  ledger can apply, so a dead letter has no innocent explanation here
 *
 * Shape of the results: verdict.ts's {name, ok, violations, violationCount}.
 */

export type EventsCheckResult = CheckResult;

/** Whether `nats-server` runs here (the events part needs it). */
export function natsServerAvailable(): boolean {
  return spawnSync('nats-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

export const NATS_INSTALL_HINT =
  'nats-server not found: the events part of the chaos run needs it (Debian: apt-get install -y nats-server)';

export interface ChaosNats {
  url: string;
  /** The running server's pid (undefined while it is down). */
  readonly pid: number | undefined;
  /** SIGTERM and wait for the exit (the store directory survives); null when it was not running. */
  stop(): Promise<ExitObserved | null>;
  /** Same port, same store. */
  start(): Promise<void>;
  /** Whether the port accepts a TCP connection right now. */
  accepting(): Promise<boolean>;
  readonly running: boolean;
  /** Exits the run did not cause; the server is started again, as a process manager would. */
  readonly unplannedExits: { at: number; code: number | null; signal: string | null; lastLines: string[] }[];
}

/**
 * Starts nats-server -js on a free port with its store under `dir` (a fresh temp dir by default)
 * and its log in `logFile` (beside the store by default).
 */
export async function startChaosNats(
  dir = mkdtempSync(path.join(os.tmpdir(), 'chaos-nats-')),
  logFile = path.join(dir, 'nats-server.log'),
): Promise<ChaosNats> {
  if (!natsServerAvailable()) throw new Error(NATS_INSTALL_HINT);
  const port = await freePort();
  let child: ChildProcess | undefined;
  let stopping = false;
  const unplannedExits: ChaosNats['unplannedExits'] = [];
  const accepting = () => portOpen(port);
  const tail = () => {
    try {
      return readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-6);
    } catch {
      return [];
    }
  };
  const nats: ChaosNats = {
    url: `nats://127.0.0.1:${port}`,
    get pid() {
      return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    get running() {
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    unplannedExits,
    accepting,
    async start() {
      stopping = false;
      const out = openSync(logFile, 'a');
      const c = spawn('nats-server', ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir], { stdio: ['ignore', out, out] });
      closeSync(out);
      child = c;
      c.once('exit', (code, signal) => {
        if (stopping || child !== c) return;
        unplannedExits.push({ at: Date.now(), code, signal, lastLines: tail() });
        setTimeout(() => void (!stopping && !nats.running && nats.start().catch(() => undefined)), 500);
      });
      for (let i = 0; !(await accepting()); i++) {
        if (c.exitCode !== null) throw new Error(`nats-server exited at start (code ${c.exitCode}): ${tail().join(' / ')}`);
        if (i > 500) throw new Error(`nats-server did not listen on ${port}`);
        await sleep(20);
      }
    },
    async stop() {
      stopping = true;
      const c = child;
      child = undefined;
      if (!c || c.exitCode !== null || c.signalCode !== null) return null;
      const pid = c.pid!;
      const exited = new Promise<ExitObserved>((r) => c.once('exit', (code, signal) => r({ pid, code, signal })));
      c.kill('SIGTERM');
      const hard = setTimeout(() => c.kill('SIGKILL'), 10_000);
      const seen = await exited;
      clearTimeout(hard);
      return seen;
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

export interface EventsFigures {
  /** Outbox rows of booking.created / booking.cancelled (any status). */
  bookingEventsInOutbox: number;
  /** Messages under <prefix>.booking.* in the stream, copies included. */
  bookingMessagesInStream: number;
  /** Ledger lines (host, currency) of the group. */
  ledgerLines: number;
  /** Open consumer dead letters of the group. */
  deadLetters: number;
}

export async function checkEvents(o: {
  databaseUrl: string;
  natsUrl: string;
  stream: string;
  subjectPrefix: string;
  group: string;
}): Promise<{ checks: CheckResult[]; figures: EventsFigures }> {
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
    for (const [id, n] of inStream)
      if (!committed.has(id)) violations.push(`${id} is in the stream ${n} time(s) but in no committed outbox row`);

    const ledger = await ledgerDifferences(database.db, o.group);
    const ledgerViolations = ledger.map((d) => `host ${d.hostId} ${d.currency}: ledger ${d.ledger}, bookings table ${d.truth}`);

    const dead = await openDeadLetters(database.db, o.group, 10);
    const deadCount = await countOpenDeadLetters(database.db, o.group);
    const deadViolations = dead.map(
      (d) =>
        `${d.message_id} (seq ${d.stream_seq}, ${d.headers['StayHub-Topic'] ?? d.subject}) dead after ${d.deliveries} deliveries: ${d.last_error.slice(0, 300)}`,
    );
    const { rows: lines } = await database.db.execute<{ n: number }>(
      sql`select count(*)::int as n from host_earnings where consumer_group = ${o.group}`,
    );
    const result = (name: string, v: string[], count = v.length): CheckResult => ({
      name,
      ok: count === 0,
      violations: v.slice(0, 10),
      violationCount: count,
    });
    return {
      checks: [
        result(EVENT_CHECKS.exactlyOnce, violations),
        result(EVENT_CHECKS.ledger, ledgerViolations),
        result(EVENT_CHECKS.deadLetters, deadViolations, deadCount),
      ],
      figures: {
        bookingEventsInOutbox: rows.length,
        bookingMessagesInStream: [...inStream.values()].reduce((a, n) => a + n, 0),
        ledgerLines: lines[0]!.n,
        deadLetters: deadCount,
      },
    };
  } finally {
    await database.close();
  }
}

/** What a consumer kill did (faults.ts). */
export interface ConsumerKillObserved {
  /** The exit seen; null: no consumer was running. */
  seen: ExitObserved | null;
  /** It had said it was running (pulling from its group), not still starting. */
  consuming: boolean;
}

/** What a NATS outage did, for the fault's evidence (faults.ts). */
export interface NatsOutageObserved {
  /** The server's exit after SIGTERM; null: no server was running. */
  stopped: ExitObserved | null;
  /** The port refused connections while the server was down. */
  refusedWhileDown: boolean;
  /** The pid listening again afterwards. */
  restartedPid: number | null;
}

/**
 * Everything run.ts needs for the events, behind a few calls:
 *
 *   const events = await startEventsChaos({ databaseUrl, root });
 *   // workers: spawn them with { ...env, ...events.env } so they relay into this NATS
 *   await events.startConsumer();                       // npm run consume:earnings, supervised
 *   faults: await events.killConsumer(downMs)  ·  await events.natsOutage(ms)
 *   after the drain: await events.finish(); results.push(...await events.check());
 *   finally: await events.stop();
 *
 * `dir` holds the NATS store and the logs (a temp dir, removed by stop(), when not given); `env` is
 * the consumer's environment before DATABASE_URL and the events settings (process.env by default;
 * the chaos run passes the workers' own, so both compute the same stream configuration).
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
  const nats = await startChaosNats(path.join(dir, 'nats'), path.join(dir, 'nats-server.log'));
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
  const { DATABASE_URL: _d, NATS_URL: _n, ...base } = o.env ?? process.env;
  // info: the consumer's "running" line tells a kill mid-stream from one during start-up.
  const consumerEnv: NodeJS.ProcessEnv = { ...base, LOG_LEVEL: 'info', DATABASE_URL: o.databaseUrl, ...env };
  const entry = path.join(o.root, 'src/events/earnings/main.ts');
  /** The pid of the consumer process that last said it is running (pulling from its group). */
  let runningPid: number | undefined;
  const consumer = new Supervised({
    name: 'earnings-consumer',
    entry,
    env: consumerEnv,
    cwd: o.root,
    logFile: path.join(dir, 'earnings-consumer.log'),
    onLine: (line) => {
      if (line.includes('"msg":"earnings consumer running"')) runningPid = consumer.pid;
    },
  });
  let supervising = false;
  let consumerStopped = false;
  let kills = 0;
  let figures: EventsFigures | undefined;
  const stopConsumer = async () => {
    supervising = false;
    if (consumerStopped) return;
    consumerStopped = true;
    await consumer.stop(10_000);
  };
  return {
    env,
    nats,
    /** The supervised consumer: its unplanned exits count as crashes in the verdict. */
    consumer,
    get consumerKills() {
      return kills;
    },
    /** What the last check() counted. */
    get figures() {
      return figures;
    },
    async startConsumer() {
      supervising = true;
      consumer.start();
    },
    /**
     * SIGKILL, down `downMs`, start again. Whatever it was applying rolls back and comes back
     * after the ack wait. Waits (up to `readyWaitMs`) for the consumer to be pulling from its
     * group, so the kill lands mid-stream rather than during its start-up. Resolves with the exit
     * seen (null: no consumer was running) and whether it was pulling.
     */
    async killConsumer(downMs = 500, readyWaitMs = 3_000): Promise<ConsumerKillObserved> {
      const deadline = Date.now() + readyWaitMs;
      while (!(consumer.pid !== undefined && runningPid === consumer.pid) && Date.now() < deadline) await sleep(20);
      const consuming = consumer.running && runningPid === consumer.pid;
      const seen = await consumer.kill('SIGKILL');
      if (seen) kills++;
      await sleep(downMs);
      if (supervising) consumer.start();
      return { seen, consuming };
    },
    /** nats-server down for `ms`, then back on the same port and store. */
    async natsOutage(ms: number): Promise<NatsOutageObserved> {
      const stopped = await nats.stop();
      const refusedWhileDown = !(await nats.accepting());
      await sleep(ms);
      await nats.start();
      return { stopped, refusedWhileDown, restartedPid: nats.pid ?? null };
    },
    /**
     * Stops the supervised consumer (SIGTERM), then runs one to the end of the stream
     * (--until-empty, bounded by `timeoutMs`). Throws if that one fails or does not finish.
     */
    async finish(timeoutMs = 120_000) {
      await stopConsumer();
      if (!nats.running) await nats.start();
      const last = spawn(process.execPath, ['--import', 'tsx', entry, '--until-empty'], {
        cwd: o.root,
        env: consumerEnv,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      last.stdout.on('data', (d) => (output += d));
      last.stderr.on('data', (d) => (output += d));
      const timer = setTimeout(() => last.kill('SIGKILL'), timeoutMs);
      const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((r) => last.once('exit', (c, s) => r([c, s])));
      clearTimeout(timer);
      writeFileSync(path.join(dir, 'earnings-consumer-until-empty.log'), output);
      if (code !== 0) {
        const why = signal === 'SIGKILL' ? `not done within ${timeoutMs / 1000} s` : `exited ${code ?? signal}`;
        throw new Error(`consume:earnings --until-empty ${why}: ${output.trim().split('\n').slice(-5).join(' / ')}`);
      }
      log('earnings consumer caught up with the stream');
    },
    async check(): Promise<CheckResult[]> {
      const r = await checkEvents({ databaseUrl: o.databaseUrl, natsUrl: nats.url, stream, subjectPrefix, group });
      figures = r.figures;
      return r.checks;
    },
    /** Everything down: the consumer, nats-server; the temp dir too when this made it. */
    async stop() {
      await stopConsumer().catch(() => undefined);
      await nats.stop();
      if (ownDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type EventsChaos = Awaited<ReturnType<typeof startEventsChaos>>;
