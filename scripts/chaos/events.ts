import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { createDatabase } from '../../src/db/client.ts';
import { openDeadLetters } from '../../src/events/dead-letters.ts';
import { ledgerDifferences } from '../../src/events/earnings/ledger.ts';
import { HEADERS, publicBody, SCHEMA_VERSIONS, subjectFor } from '../../src/events/subjects.ts';
import { EVENTS_RELAY } from '../../src/worker/handlers/events-relay.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { lifelineEnv } from '../../src/process/lifeline.ts';
import { guardChild } from '../../src/db/orphan-watchdog.ts';
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
      // Not a node process, so no lifeline: a watchdog stops it if the run dies without doing so.
      if (c.pid !== undefined) guardChild(c.pid);
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

/** How a forged event lies (fault "forged-event"). */
export type ForgeryKind = 'unknown-booking' | 'wrong-amount';

/** A forged booking.created the stream accepted. */
export interface ForgedEvent {
  kind: ForgeryKind;
  messageId: string;
  /** The booking it names: one that does not exist (unknown-booking), or a real one (wrong-amount). */
  bookingId: string;
  /** A real property of the run, so of a real host. */
  propertyId: string;
  /** What it claims, and what the booking's total really is (wrong-amount). */
  total: number;
  realTotal: number | null;
  currency: string;
  /** The PubAck's stream sequence. */
  seq: number;
  publishedAt: number;
}

/** A deletion of the events stream (fault "stream-delete"). */
export interface StreamDeletion {
  /** When the delete was answered (ms epoch). */
  at: number;
  createdBefore: string;
  /** The recreated stream's creation time; null: not back within the bound. */
  createdAfter: string | null;
}

export interface EventsFigures {
  /** Outbox rows of booking.created / booking.cancelled (any status). */
  bookingEventsInOutbox: number;
  /** Messages under <prefix>.booking.* in the stream, copies included. */
  bookingMessagesInStream: number;
  /** Booking events relayed before a stream deletion and gone with it (allowed, listed here). */
  goneWithDeletedStream: number;
  /** Ledger lines (host, currency) of the group. */
  ledgerLines: number;
  /** Open consumer dead letters of the group, the forged events' included. */
  deadLetters: number;
  /** Forged events published / refused (dead-lettered by the ledger) / applied. */
  forged: number;
  forgedRefused: number;
  forgedApplied: number;
  streamDeletions: number;
  /** Bookings the ledger does not count, and cancellations it does not count (after a deletion: its lost events). */
  uncountedBookings: number;
  uncountedCancellations: number;
}

export async function checkEvents(o: {
  databaseUrl: string;
  natsUrl: string;
  stream: string;
  subjectPrefix: string;
  group: string;
  forged?: ForgedEvent[];
  deletions?: StreamDeletion[];
}): Promise<{ checks: CheckResult[]; figures: EventsFigures }> {
  const forged = o.forged ?? [];
  const forgedIds = new Set(forged.map((f) => f.messageId));
  const lastDeletion = Math.max(-Infinity, ...(o.deletions ?? []).map((d) => d.at));
  const database = createDatabase(o.databaseUrl, { max: 2, applicationName: 'chaos-events-check' });
  try {
    const { rows } = await database.db.execute<{
      public_id: string;
      topic: string;
      key: string;
      status: string;
      handlers_done: string[];
      /** Relay work of it still waits in the relay's lane, or died there. */
      lane_open: boolean;
      created_ms: number;
    }>(
      // An event is relayed when its message and the relay's lane work of it (src/outbox/lanes.ts)
      // are: a message whose relay failed is DONE while its lane row still waits or is DEAD.
      sql`with lanes as (
            select origin_id, max(case status when 'DEAD' then 2 when 'PENDING' then 1 else 0 end) as worst
              from outbox where lane is not null group by origin_id)
          select o.public_id, o.topic, o.key,
                 case l.worst when 2 then 'DEAD' when 1 then 'PENDING' else o.status end as status,
                 o.handlers_done, coalesce(l.worst, 0) > 0 as lane_open,
                 (extract(epoch from o.created_at) * 1000)::float8 as created_ms
            from outbox o left join lanes l on l.origin_id = o.public_id
           where o.lane is null and o.topic in ('booking.created', 'booking.cancelled')`,
    );
    const inStream = await countStream(o.natsUrl, o.stream, `${o.subjectPrefix}.booking.>`);
    const relayed = (r: { handlers_done: string[]; lane_open: boolean }) => r.handlers_done.includes(EVENTS_RELAY) && !r.lane_open;
    const violations: string[] = [];
    const committed = new Set(rows.map((r) => r.public_id));
    let gone = 0;
    for (const r of rows) {
      const n = inStream.get(r.public_id) ?? 0;
      if (n === 1) continue;
      // A deleted stream takes what it held with it: an event written before the last deletion and
      // relayed (its relay handler done, and no relay work of it left in the relay's lane) is
      // allowed to be missing from the stream of now.
      if (n === 0 && r.created_ms < lastDeletion && relayed(r)) {
        gone++;
        continue;
      }
      violations.push(`${r.public_id} (outbox ${r.status}) is in the stream ${n} time(s)`);
    }
    for (const [id, n] of inStream)
      if (!committed.has(id) && !forgedIds.has(id)) violations.push(`${id} is in the stream ${n} time(s) but in no committed outbox row`);

    const ledger = await ledgerDifferences(database.db, o.group);
    const ledgerViolations = ledger.map((d) => `host ${d.hostId} ${d.currency}: ledger ${d.ledger}, bookings table ${d.truth}`);
    // Where a difference comes from: the confirmed bookings the ledger does not count (money lost)
    // and the cancellations it does not count (money it still credits), and whether their events
    // were relayed into a stream that was deleted before the consumer read them. A cancelled
    // booking counted neither way nets to zero on both sides.
    const { rows: uncounted } = await database.db.execute<{ public_id: string; status: string; total: number; what: string }>(sql`
      select b.public_id, b.status, b.total, case when e.booking_id is null then 'booking' else 'cancellation' end as what
        from bookings b
        left join earnings_bookings e on e.booking_id = b.id and e.consumer_group = ${o.group}
       where (e.booking_id is null and b.status = 'confirmed') or (b.status = 'cancelled' and not e.cancelled)`);
    const byKey = new Map(rows.map((r) => [`${r.topic}:${r.key}`, r]));
    for (const u of uncounted.slice(0, 10)) {
      const m = byKey.get(`${u.what === 'booking' ? 'booking.created' : 'booking.cancelled'}:${u.public_id}`);
      const where = !m
        ? 'no event in the outbox'
        : (inStream.get(m.public_id) ?? 0) > 0
          ? `its event ${m.public_id} is in the stream`
          : m.created_ms < lastDeletion && relayed(m)
            ? `its event ${m.public_id} was relayed (outbox ${m.status}) into the stream that was deleted at ${new Date(lastDeletion).toISOString()}, before the consumer applied it`
            : `its event ${m.public_id} (outbox ${m.status}) is not in the stream`;
      ledgerViolations.push(`the ledger does not count the ${u.what} of booking ${u.public_id} (${u.status}, total ${u.total}): ${where}`);
    }

    const dead = await openDeadLetters(database.db, o.group, 100_000);
    const deadById = new Map(dead.map((d) => [d.message_id, d]));
    const unexpectedDead = dead.filter((d) => !forgedIds.has(d.message_id));
    const deadViolations = unexpectedDead.map(
      (d) =>
        `${d.message_id} (seq ${d.stream_seq}, ${d.headers['StayHub-Topic'] ?? d.subject}) dead after ${d.deliveries} deliveries: ${d.last_error.slice(0, 300)}`,
    );

    // The inbox lists what the group applied: a forged event must never be in it.
    const { rows: appliedRows } = await database.db.execute<{ message_id: string }>(
      sql`select message_id from processed_messages
            where consumer_group = ${o.group} and message_id in (select jsonb_array_elements_text(${JSON.stringify([...forgedIds])}::jsonb))`,
    );
    const applied = new Set(appliedRows.map((r) => r.message_id));
    const forgedViolations: string[] = [];
    let refused = 0;
    for (const f of forged) {
      const what = `forged ${f.messageId} (${f.kind}: booking ${f.bookingId}, property ${f.propertyId}, total ${f.total}${f.realTotal === null ? '' : ` for a real ${f.realTotal}`}, seq ${f.seq})`;
      const d = deadById.get(f.messageId);
      if (applied.has(f.messageId)) forgedViolations.push(`${what} was applied: it is in the group's inbox`);
      if (!d) forgedViolations.push(`${what} is not a consumer dead letter`);
      else if (!/refused/.test(d.last_error))
        forgedViolations.push(`${what} dead-lettered, but not as refused: ${d.last_error.slice(0, 200)}`);
      else if (!applied.has(f.messageId)) refused++;
    }
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
        result(EVENT_CHECKS.ledger, ledgerViolations, Math.max(ledger.length, uncounted.length)),
        result(EVENT_CHECKS.deadLetters, deadViolations),
        result(EVENT_CHECKS.forgedRefused, forgedViolations),
      ],
      figures: {
        bookingEventsInOutbox: rows.length,
        bookingMessagesInStream: [...inStream.entries()].filter(([id]) => !forgedIds.has(id)).reduce((a, [, n]) => a + n, 0),
        goneWithDeletedStream: gone,
        ledgerLines: lines[0]!.n,
        deadLetters: dead.length,
        forged: forged.length,
        forgedRefused: refused,
        forgedApplied: applied.size,
        streamDeletions: o.deletions?.length ?? 0,
        uncountedBookings: uncounted.filter((u) => u.what === 'booking').length,
        uncountedCancellations: uncounted.filter((u) => u.what === 'cancellation').length,
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

/** What a stream deletion did, for the fault's evidence (faults.ts). */
export interface StreamDeleteObserved {
  /** The stream's creation time before; null: there was no stream to delete. */
  createdBefore: string | null;
  messagesBefore: number;
  /** The server answered the delete with success. */
  deleted: boolean;
  /** The stream's creation time once it was back; null: not back within the bound. */
  createdAfter: string | null;
  /** How long after the delete the stream and the group's durable were both back, ms. */
  backAfterMs: number | null;
  groupBack: boolean;
}

/** What a forged event did (faults.ts): the stream's PubAck, and whether the consumer refused it yet. */
export interface ForgedEventObserved {
  forged: ForgedEvent | null;
  /** Why nothing was published (no booking yet, NATS or the database not answering). */
  failed?: string;
  /** How long after the publish the group's dead letter for it appeared; null: not within the wait. */
  deadLetteredAfterMs: number | null;
  lastError: string | null;
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
  const forged: ForgedEvent[] = [];
  const deletions: StreamDeletion[] = [];
  // The forger's reads (a real booking to name, the dead letter it should become).
  let database: ReturnType<typeof createDatabase> | undefined;
  const db = () => (database ??= createDatabase(o.databaseUrl, { max: 2, applicationName: 'chaos-events-faults' })).db;
  const natsServers = nats.url.replace('nats://', '');
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
        env: { ...consumerEnv, ...lifelineEnv() },
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
    /**
     * Deletes the events stream under the relay and the consumer, then waits (up to `backWithinMs`)
     * until it is back (the relay recreates it on its next publish, the consumer when its pull
     * fails; both wait 2 s first) with the group's durable on it.
     */
    async deleteStream(backWithinMs = 20_000): Promise<StreamDeleteObserved> {
      const nc = await connect({ servers: natsServers, timeout: 3_000 });
      try {
        const jsm = await jetstreamManager(nc);
        const before = await jsm.streams.info(stream).catch(() => null);
        if (!before)
          return { createdBefore: null, messagesBefore: 0, deleted: false, createdAfter: null, backAfterMs: null, groupBack: false };
        const deleted = await jsm.streams.delete(stream);
        const at = Date.now();
        let after: string | null = null;
        let groupBack = false;
        while (Date.now() - at < backWithinMs) {
          await sleep(100);
          const info = await jsm.streams.info(stream).catch(() => null);
          if (!info || info.created === before.created) continue;
          after = info.created;
          groupBack = await jsm.consumers.info(stream, group).then(
            () => true,
            () => false,
          );
          if (groupBack) break;
        }
        deletions.push({ at, createdBefore: before.created, createdAfter: after });
        return {
          createdBefore: before.created,
          messagesBefore: before.state.messages,
          deleted,
          createdAfter: after,
          backAfterMs: after && groupBack ? Date.now() - at : null,
          groupBack,
        };
      } finally {
        await nc.close();
      }
    },
    /**
     * Publishes a booking.created the relay never wrote, on the stream's subject and with the
     * relay's headers: `unknown-booking` names a real property (so a real host) and a booking id
     * that does not exist; `wrong-amount` is a real booking's event with another total. `pick`
     * (in [0, 1), from the seed) chooses the booking among the latest 50. Then waits (up to
     * `refusedWithinMs`) for the group's dead letter, so a stream deletion right after cannot take
     * the forgery away before the consumer has judged it.
     */
    async forgeEvent(kind: ForgeryKind, pick: number, refusedWithinMs = 15_000): Promise<ForgedEventObserved> {
      let latest: { key: string; payload: Record<string, unknown> }[] = [];
      for (let i = 0; i < 100 && latest.length === 0; i++) {
        try {
          ({ rows: latest } = await db().execute<{ key: string; payload: Record<string, unknown> }>(
            sql`select key, payload from outbox where topic = 'booking.created' and lane is null order by id desc limit 50`,
          ));
          if (latest.length === 0) await sleep(100);
        } catch {
          await sleep(100); // PostgreSQL restarting
        }
      }
      const real = latest[Math.floor(pick * latest.length)];
      if (!real) return { forged: null, failed: 'no booking to name', deadLetteredAfterMs: null, lastError: null };
      const body = publicBody(real.payload) as { bookingId: string; propertyId: string; total: number; currency: string };
      const messageId = randomUUID();
      const lie =
        kind === 'unknown-booking'
          ? { ...body, bookingId: randomUUID(), idempotencyKey: `forged:${messageId}` }
          : { ...body, total: body.total + 1 + Math.floor(pick * 50_000) };
      const h = natsHeaders();
      h.set(HEADERS.topic, 'booking.created');
      h.set(HEADERS.key, lie.bookingId);
      h.set(HEADERS.outboxId, messageId);
      h.set(HEADERS.occurredAt, new Date().toISOString());
      h.set(HEADERS.schemaVersion, String(SCHEMA_VERSIONS['booking.created']));
      let seq: number;
      const nc = await connect({ servers: natsServers, timeout: 3_000 });
      try {
        const ack = await jetstream(nc).publish(subjectFor(subjectPrefix, 'booking.created'), JSON.stringify(lie), {
          msgID: messageId,
          headers: h,
          timeout: 3_000,
        });
        seq = ack.seq;
      } catch (err) {
        return { forged: null, failed: `publish: ${(err as Error).message}`, deadLetteredAfterMs: null, lastError: null };
      } finally {
        await nc.close();
      }
      const publishedAt = Date.now();
      const f: ForgedEvent = {
        kind,
        messageId,
        bookingId: lie.bookingId,
        propertyId: lie.propertyId,
        total: lie.total,
        realTotal: kind === 'wrong-amount' ? body.total : null,
        currency: lie.currency,
        seq,
        publishedAt,
      };
      forged.push(f);
      while (Date.now() - publishedAt < refusedWithinMs) {
        const { rows } = await db()
          .execute<{ last_error: string }>(
            sql`select last_error from consumer_dead_letters where consumer_group = ${group} and message_id = ${messageId}`,
          )
          .catch(() => ({ rows: [] as { last_error: string }[] }));
        if (rows[0]) return { forged: f, deadLetteredAfterMs: Date.now() - publishedAt, lastError: rows[0].last_error };
        await sleep(100);
      }
      return { forged: f, deadLetteredAfterMs: null, lastError: null };
    },
    /** The forged events the stream accepted, and the stream's deletions, so far. */
    get forged(): readonly ForgedEvent[] {
      return forged;
    },
    get deletions(): readonly StreamDeletion[] {
      return deletions;
    },
    async check(): Promise<CheckResult[]> {
      const r = await checkEvents({ databaseUrl: o.databaseUrl, natsUrl: nats.url, stream, subjectPrefix, group, forged, deletions });
      figures = r.figures;
      return r.checks;
    },
    /** Everything down: the consumer, nats-server; the temp dir too when this made it. */
    async stop() {
      await stopConsumer().catch(() => undefined);
      await database?.close().catch(() => undefined);
      database = undefined;
      await nats.stop();
      if (ownDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type EventsChaos = Awaited<ReturnType<typeof startEventsChaos>>;
