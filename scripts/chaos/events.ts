import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jetstream, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { createDatabase } from '../../src/db/client.ts';
import { jetStreamElecting, onceJetStreamAnswers } from '../../src/events/connection.ts';
import { openDeadLetters } from '../../src/events/dead-letters.ts';
import { ledgerDifferences } from '../../src/events/earnings/ledger.ts';
import { HEADERS, publicBody, SCHEMA_VERSIONS, subjectFor } from '../../src/events/subjects.ts';
import { EVENTS_RELAY } from '../../src/worker/handlers/events-relay.ts';
import { freePort } from '../../src/net/free-port.ts';
import { portOpen } from '../../src/net/port-open.ts';
import { lifelineEnv } from '../../src/process/lifeline.ts';
import { guardChild } from '../../src/db/orphan-watchdog.ts';
import { Supervised, type ExitObserved } from './processes.ts';
import { EVENT_CHECKS, type CheckResult } from './checks.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/*
 * The events part of the chaos run: a three-node JetStream cluster holding the stream at three
 * replicas, which the run can stop and start whole (fault "nats-outage"), lose one node of (SIGKILL,
 * often the stream's leader: "nats-node-kill"), or have one node come back with its store wiped
 * ("nats-node-wipe"); the earnings consumer (`npm run consume:earnings`) supervised like the other
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

/**
 * Starts a JetStream cluster of `size` nats-server processes on 127.0.0.1 (free client and route
 * ports), node i's store under `dir`/n<i> and its log in `dir`/nats-n<i>.log, and waits until each
 * listens. A node that exits unasked is started again after half a second.
 */
export async function startChaosNats(dir = mkdtempSync(path.join(os.tmpdir(), 'chaos-nats-')), size = 3): Promise<ChaosNats> {
  if (!natsServerAvailable()) throw new Error(NATS_INSTALL_HINT);
  const cluster = `chaos-${randomUUID().slice(0, 8)}`;
  const nodes: {
    name: string;
    port: number;
    routePort: number;
    monitorPort: number;
    store: string;
    logFile: string;
    child?: ChildProcess;
    stopping: boolean;
  }[] = [];
  for (let i = 0; i < size; i++) {
    nodes.push({
      name: `n${i + 1}`,
      port: await freePort(),
      routePort: await freePort(),
      monitorPort: await freePort(),
      store: path.join(dir, `n${i + 1}`),
      logFile: path.join(dir, `nats-n${i + 1}.log`),
      stopping: false,
    });
  }
  const routes = nodes.map((n) => `nats://127.0.0.1:${n.routePort}`).join(',');
  const unplannedExits: ChaosNats['unplannedExits'] = [];
  const alive = (c: ChildProcess | undefined) => c !== undefined && c.exitCode === null && c.signalCode === null;
  const tail = (logFile: string) => {
    try {
      return readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-6);
    } catch {
      return [];
    }
  };
  const startNode = async (i: number) => {
    const n = nodes[i]!;
    if (alive(n.child)) return;
    n.stopping = false;
    mkdirSync(n.store, { recursive: true });
    const out = openSync(n.logFile, 'a');
    const args = ['-js', '-n', n.name, '-a', '127.0.0.1', '-p', String(n.port), '-m', String(n.monitorPort), '-sd', n.store];
    const c = spawn(
      'nats-server',
      [...args, '--cluster_name', cluster, '--cluster', `nats://127.0.0.1:${n.routePort}`, '--routes', routes],
      {
        stdio: ['ignore', out, out],
      },
    );
    closeSync(out);
    // Not a node process, so no lifeline: a watchdog stops it if the run dies without doing so.
    if (c.pid !== undefined) guardChild(c.pid);
    n.child = c;
    c.once('exit', (code, signal) => {
      if (n.stopping || n.child !== c) return;
      unplannedExits.push({ at: Date.now(), code, signal, lastLines: [`${n.name}:`, ...tail(n.logFile)] });
      setTimeout(() => void (!n.stopping && !alive(n.child) && startNode(i).catch(() => undefined)), 500);
    });
    for (let k = 0; !(await portOpen(n.port)); k++) {
      if (c.exitCode !== null)
        throw new Error(`nats-server ${n.name} exited at start (code ${c.exitCode}): ${tail(n.logFile).join(' / ')}`);
      if (k > 500) throw new Error(`nats-server ${n.name} did not listen on ${n.port}`);
      await sleep(20);
    }
  };
  const stopNode = async (i: number, signal: NodeJS.Signals): Promise<ExitObserved | null> => {
    const n = nodes[i]!;
    n.stopping = true;
    const c = n.child;
    n.child = undefined;
    if (!c || !alive(c)) return null;
    const pid = c.pid!;
    const exited = new Promise<ExitObserved>((r) => c.once('exit', (code, sig) => r({ pid, code, signal: sig })));
    c.kill(signal);
    const hard = setTimeout(() => c.kill('SIGKILL'), 10_000);
    const seen = await exited;
    clearTimeout(hard);
    return seen;
  };
  const nats: ChaosNats = {
    url: nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(','),
    servers: nodes.map((n) => `127.0.0.1:${n.port}`),
    size,
    get pid() {
      return alive(nodes[0]!.child) ? nodes[0]!.child!.pid : undefined;
    },
    get running() {
      return nodes.every((n) => alive(n.child));
    },
    unplannedExits,
    accepting: async () => (await Promise.all(nodes.map((n) => portOpen(n.port)))).some(Boolean),
    async start() {
      await Promise.all(nodes.map((_, i) => startNode(i)));
    },
    async stop() {
      const seen = await Promise.all(nodes.map((_, i) => stopNode(i, 'SIGTERM')));
      return seen.every((e) => e !== null) ? seen[0]! : null;
    },
    node: (i) => ({ name: nodes[i]!.name, pid: alive(nodes[i]!.child) ? nodes[i]!.child!.pid : undefined }),
    killNode: (i) => stopNode(i, 'SIGKILL'),
    startNode,
    wipeStore(i) {
      const n = nodes[i]!;
      if (alive(n.child)) throw new Error(`nats-server ${n.name} is running: stop it before wiping its store`);
      rmSync(n.store, { recursive: true, force: true });
      mkdirSync(n.store, { recursive: true });
      return readdirSync(n.store).length === 0;
    },
    async replicaOf(i, stream) {
      type Jsz = {
        account_details?: {
          stream_detail?: { name: string; state: { messages: number; last_seq: number }; consumer_detail?: { name: string }[] }[];
        }[];
      };
      try {
        const res = await fetch(`http://127.0.0.1:${nodes[i]!.monitorPort}/jsz?streams=true&consumers=true`, {
          signal: AbortSignal.timeout(2_000),
        });
        const jsz = (await res.json()) as Jsz;
        const s = (jsz.account_details ?? []).flatMap((a) => a.stream_detail ?? []).find((d) => d.name === stream);
        if (!s) return null;
        return { lastSeq: s.state.last_seq, messages: s.state.messages, consumers: (s.consumer_detail ?? []).map((c) => c.name) };
      } catch {
        return null;
      }
    },
  };
  await nats.start();
  return nats;
}

/** Message id → how many times it is in the stream, for subjects under `filter`. Ordered consumer: one pass, no acks. */
async function countStream(natsUrl: string, stream: string, filter: string): Promise<Map<string, number>> {
  const nc = await connect({ servers: natsUrl.split(',').map((u) => u.replace('nats://', '')) });
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

/** What a consumer kill did (faults/). */
export interface ConsumerKillObserved {
  /** The exit seen; null: no consumer was running. */
  seen: ExitObserved | null;
  /** It had said it was running (pulling from its group), not still starting. */
  consuming: boolean;
}

/** What a NATS outage (every node down) did, for the fault's evidence (faults/). */
export interface NatsOutageObserved {
  /** The first node's exit after SIGTERM, every node's exit seen; null: a node was not running. */
  stopped: ExitObserved | null;
  /** The port refused connections while the server was down. */
  refusedWhileDown: boolean;
  /** The pid listening again afterwards. */
  restartedPid: number | null;
}

/** What a node kill or wipe did, for the fault's evidence (faults/). */
export interface NatsNodeObserved {
  /** The node's server name. */
  node: string;
  /** It led the stream (kill) or the earnings group (wipe) when it was hit. */
  wasLeader: boolean;
  /** Its exit after SIGKILL; null: it was not running. */
  seen: ExitObserved | null;
  /** Its store was removed before it started again (wipe). */
  wiped: boolean;
  /** How long after its start it held current replicas of the stream and the group; null: not within the bound. */
  caughtUpAfterMs: number | null;
}

/** What a stream deletion did, for the fault's evidence (faults/). */
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

/** What a forged event did (faults/): the stream's PubAck, and whether the consumer refused it yet. */
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
 *           await events.killNatsNode({ leader, index }, downMs)  ·  await events.wipeNatsNode({ leader, index })
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
  const nats = await startChaosNats(path.join(dir, 'nats'));
  const stream = 'CHAOS_EVENTS';
  const subjectPrefix = 'chaos';
  const group = o.group ?? 'earnings';
  const env: Record<string, string> = {
    NATS_URL: nats.url,
    EVENTS_STREAM: stream,
    EVENTS_SUBJECT_PREFIX: subjectPrefix,
    EVENTS_EARNINGS_GROUP: group,
    EVENTS_ACK_WAIT_SECONDS: '5',
    // Every event on each of the three nodes: any one can be lost, or come back empty.
    EVENTS_REPLICAS: String(nats.size),
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
  const natsServers = nats.servers;

  /** Which node leads `what` (the stream, or the group's durable) now; undefined: none, or NATS not answering. */
  const leaderOf = async (what: 'stream' | 'group'): Promise<number | undefined> => {
    const nc = await connect({ servers: natsServers, timeout: 3_000 }).catch(() => undefined);
    if (!nc) return undefined;
    try {
      const jsm = await jetstreamManager(nc, { timeout: 3_000, checkAPI: false });
      const info = what === 'stream' ? await jsm.streams.info(stream) : await jsm.consumers.info(stream, group);
      const leader = info.cluster?.leader;
      for (let i = 0; i < nats.size; i++) if (nats.node(i).name === leader) return i;
      return undefined;
    } catch {
      return undefined;
    } finally {
      await nc.close().catch(() => undefined);
    }
  };

  /**
   * The node leading the stream or the group, waiting (up to `withinMs`) while it has none: after
   * an earlier fault the cluster may still be electing, and a leader fault must hit a leader.
   */
  const leaderWithin = async (what: 'stream' | 'group', withinMs: number): Promise<number | undefined> => {
    const t0 = Date.now();
    for (;;) {
      const leader = await leaderOf(what);
      if (leader !== undefined || Date.now() - t0 >= withinMs) return leader;
      await sleep(200);
    }
  };

  /** Waits (up to `withinMs`) until the stream has a leader; whether it has. */
  const streamLed = async (withinMs: number): Promise<boolean> => (await leaderWithin('stream', withinMs)) !== undefined;

  /**
   * Waits (up to `withinMs`) until node `i` itself holds the stream up to where its leader was
   * once the node was back, and the group's durable: in step with the others again, so the next
   * node fault cannot take the last copy of anything. Asked of the node (its /jsz), not of the
   * leader, whose view of a replica lags: it once called a node wiped 15 ms earlier current. How
   * long it took, or null.
   */
  const caughtUp = async (i: number, withinMs: number): Promise<number | null> => {
    const t0 = Date.now();
    const nc = await connect({ servers: natsServers, timeout: 3_000, maxReconnectAttempts: -1 }).catch(() => undefined);
    if (!nc) return null;
    try {
      const jsm = await jetstreamManager(nc, { timeout: 3_000, checkAPI: false });
      let target: number | undefined;
      while (Date.now() - t0 < withinMs) {
        target ??= (await jsm.streams.info(stream).catch(() => undefined))?.state.last_seq;
        const mine = await nats.replicaOf(i, stream);
        if (target !== undefined && mine && mine.lastSeq >= target && mine.consumers.includes(group)) return Date.now() - t0;
        await sleep(200);
      }
      return null;
    } finally {
      await nc.close().catch(() => undefined);
    }
  };
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
    /** Every node down for `ms` (SIGTERM), then back on the same ports and stores. */
    async natsOutage(ms: number): Promise<NatsOutageObserved> {
      const stopped = await nats.stop();
      const refusedWhileDown = !(await nats.accepting());
      await sleep(ms);
      await nats.start();
      // Listening is not leading: the next fault in the lane waits (bounded) until the stream has
      // a leader again, rather than meet the cluster mid-election.
      await streamLed(30_000);
      return { stopped, refusedWhileDown, restartedPid: nats.pid ?? null };
    },
    /**
     * SIGKILL one node (the stream's leader when `leader`, else node `index`), down `downMs`, start
     * it again on its store, and wait until it is current again (bounded by `catchUpMs`).
     */
    async killNatsNode(target: { leader: boolean; index: number }, downMs: number, catchUpMs = 30_000): Promise<NatsNodeObserved> {
      const leader = target.leader ? await leaderWithin('stream', 15_000) : undefined;
      const i = leader ?? target.index % nats.size;
      const seen = await nats.killNode(i);
      await sleep(downMs);
      await nats.startNode(i);
      return {
        node: nats.node(i).name,
        wasLeader: leader !== undefined,
        seen,
        wiped: false,
        caughtUpAfterMs: await caughtUp(i, catchUpMs),
      };
    },
    /**
     * SIGKILL one node (the one leading the earnings group when `leader`, else node `index`),
     * remove its store, start it empty, and wait until the others have given it the stream and
     * the group again (bounded by `catchUpMs`).
     */
    async wipeNatsNode(target: { leader: boolean; index: number }, catchUpMs = 60_000): Promise<NatsNodeObserved> {
      const leader = target.leader ? await leaderWithin('group', 15_000) : undefined;
      const i = leader ?? target.index % nats.size;
      const seen = await nats.killNode(i);
      const wiped = nats.wipeStore(i);
      await nats.startNode(i);
      return { node: nats.node(i).name, wasLeader: leader !== undefined, seen, wiped, caughtUpAfterMs: await caughtUp(i, catchUpMs) };
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
     * fails; both wait 2 s first) with the group's durable on it. 45 s: on a loaded machine a
     * three-node cluster's delete and re-create, each through its leaders, took longer than 20 s.
     */
    async deleteStream(backWithinMs = 45_000): Promise<StreamDeleteObserved> {
      const nc = await connect({ servers: natsServers, timeout: 3_000 });
      try {
        // Right after a node kill the cluster may still be electing: the API times out for a
        // few seconds, which is the cluster's business, not a failed fault.
        const jsm = await onceJetStreamAnswers('JetStream API', () => jetstreamManager(nc));
        const before = await onceJetStreamAnswers('stream info', () => jsm.streams.info(stream)).catch(() => null);
        if (!before)
          return { createdBefore: null, messagesBefore: 0, deleted: false, createdAfter: null, backAfterMs: null, groupBack: false };
        // A delete whose answer was lost to a timeout has happened: the retry's "not found" says so.
        const deleted = await onceJetStreamAnswers('stream delete', () =>
          jsm.streams.delete(stream).catch((err: unknown) => {
            if (err instanceof JetStreamApiError && err.code === 10059) return true;
            throw err;
          }),
        );
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
        // The same message id on every try: a try whose PubAck was lost is not stored twice. Tried
        // again (up to 15 s) while the cluster has no leader for the stream.
        const publish = () =>
          jetstream(nc).publish(subjectFor(subjectPrefix, 'booking.created'), JSON.stringify(lie), {
            msgID: messageId,
            headers: h,
            timeout: 3_000,
          });
        const until = Date.now() + 15_000;
        let ack;
        for (;;) {
          try {
            ack = await publish();
            break;
          } catch (err) {
            // A timeout, or "no responders" (nobody listens on the stream's subjects between leaders).
            const cause = (err as { cause?: Error }).cause;
            const electing = jetStreamElecting(err) || /no responders/i.test(`${(err as Error).message} ${cause?.message ?? ''}`);
            if (!electing || Date.now() > until) throw err;
            await sleep(250);
          }
        }
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
