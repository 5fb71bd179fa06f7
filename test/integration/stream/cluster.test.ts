import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../../src/config.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { desiredStream } from '../../../src/events/stream.ts';
import { askStreamLeaderToStepDown } from '../../../src/events/stuck-leader.ts';
import { book, listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, startNatsCluster, type NatsCluster } from '../../helpers/nats.ts';
import { waitFor } from '../../helpers/wait.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The events path on a three-node JetStream cluster, the stream at three replicas: the worker's
 * relay and the earnings consumer run as processes while bookings are made before, during and
 * after the stream leader is SIGKILLed, after it comes back, and after a node comes back with its
 * store wiped. At the end every relayed outbox message is in the stream exactly once (by
 * Nats-Msg-Id), and the ledger equals the bookings table. DEBUG_EVENTS=1 shows the processes' logs.
 *
 * Slow (about 30 s alone): every step waits for the real cluster to elect a leader or catch a node up.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const skip = skipWithoutNats();
const t = useTestApp();
const stream = freshStream('C');
let cluster: NatsCluster | undefined;

const env = (extra: Record<string, string> = {}) =>
  eventsEnv(t.db.url, cluster!.url, stream, {
    EVENTS_REPLICAS: '3',
    EVENTS_ACK_WAIT_SECONDS: '2',
    EVENTS_PUBLISH_TIMEOUT_MS: '1000',
    BACKOFF_BASE_SECONDS: '0.2',
    BACKOFF_MAX_SECONDS: '1',
    MAX_ATTEMPTS: '100',
    LOG_LEVEL: process.env.DEBUG_EVENTS ? 'info' : 'warn',
    ...extra,
  });

beforeAll(async () => {
  if (skip) return;
  cluster = await startNatsCluster();
  // The stream as the worker declares it, created and led before any process starts.
  const want = desiredStream(loadConfig(env()));
  await cluster.jsm.streams.add(want);
  await cluster.waitForStream(stream);
}, 40_000);
afterAll(async () => {
  await cluster?.destroy();
});

/** A process of ours and its log lines (JSON), kept for the test to judge. */
function startProcess(entry: string): { child: ChildProcess; lines: string[] } {
  const { DATABASE_URL: _a, NATS_URL: _b, ...inherited } = process.env;
  const child = spawn(process.execPath, entryArgs(entry), {
    cwd: ROOT,
    env: { ...inherited, ...env() },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (l) => {
    lines.push(l);
    if (process.env.DEBUG_EVENTS) console.log(l);
  });
  return { child, lines };
}

/**
 * Log lines that say the stream or the group was lost, or at error level: a leader's node lost is
 * an election to wait out, never a deleted stream to recreate nor a group to rebuild.
 */
const alarms = (lines: string[]) =>
  lines.filter((l) => {
    const entry = JSON.parse(l) as { level?: number };
    return (entry.level ?? 0) >= 50 || /EventsStreamMissingError|is gone|recreat|rebuil/i.test(l);
  });

async function stopProcess(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill('SIGTERM');
  return exited;
}

let night = 10;
/** `n` confirmed bookings on a new property of `host`, one every other night, and one of them cancelled. */
async function makeBookings(host: Session, guest: Session, n: number) {
  const p = await listProperty(t.app, host, { currency: 'EUR' });
  for (let i = 0; i < n; i++) {
    const res = await book(t.app, guest, { propertyId: p.id, inDays: (night += 2), nights: 1 });
    expect(res.statusCode, res.body).toBe(201);
    if (i === 0) {
      const c = await t.app.inject({ method: 'POST', url: `/bookings/${res.json().id}/cancel`, headers: guest.auth });
      expect(c.statusCode, c.body).toBe(200);
    }
  }
}

/** The public ids of the outbox messages whose event the relay must publish: every topic's. */
async function relayedMessageIds(): Promise<string[]> {
  const { rows } = await t.db.db.execute<{ public_id: string }>(sql`select public_id from outbox where lane is null`);
  return rows.map((r) => r.public_id).sort();
}

/** Every outbox message DONE, its relay's lane work included: the relay has nothing left to publish. */
async function allRelayed(): Promise<boolean> {
  const { rows } = await t.db.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
  return rows[0]!.n === 0;
}

describe.skipIf(skip)('events through a three-node JetStream cluster', () => {
  it('relays and consumes every event once through the leader killed, back, and a node back empty', async () => {
    const c = cluster!;
    const host = await signUp(t.app, 'host');
    const guest = await signUp(t.app, 'guest');
    let wiped = -1;
    const worker = startProcess('src/commands/drain-outbox.ts');
    const consumer = startProcess('src/commands/consume-earnings.ts');
    try {
      await makeBookings(host, guest, 4);
      await waitFor(async () => (await ledgerDifferences(t.db.db, 'earnings')).length === 0 || undefined, 30_000, 'first bookings counted');

      // The stream leader dies without a word; bookings go on while the others elect a new one.
      const leader = await c.streamLeader(stream);
      await c.kill(leader);
      await makeBookings(host, guest, 4);
      const next = await c.streamLeader(stream);
      expect(next).not.toBe(leader);
      await makeBookings(host, guest, 4);

      // It comes back with its store and catches up.
      await c.start(leader);
      await makeBookings(host, guest, 4);
      await c.waitForStream(stream);

      // A node loses its disk (the one leading the earnings group) and comes back empty.
      wiped = await c.consumerLeader(stream, 'earnings');
      await c.wipe(wiped);
      await makeBookings(host, guest, 4);
      await c.waitForStream(stream);
      await makeBookings(host, guest, 4);

      await waitFor(async () => (await allRelayed()) || undefined, 30_000, 'every outbox message relayed');
      // The group caught up, and then the ledger: equal totals alone can be a moment when a booking
      // and another's cancellation are both still to apply, and the consumer is stopped next.
      // Asked again while the cluster still elects ("JetStream system temporarily unavailable").
      const caughtUp = async () => {
        const info = await c.jsm.consumers.info(stream, 'earnings').catch(() => undefined);
        return info !== undefined && info.num_pending === 0 && info.num_ack_pending === 0;
      };
      await waitFor(
        async () => ((await caughtUp()) && (await ledgerDifferences(t.db.db, 'earnings')).length === 0) || undefined,
        60_000,
        'the earnings group caught up and ledger = bookings',
      );
    } finally {
      const [w, e] = await Promise.all([stopProcess(worker.child), stopProcess(consumer.child)]);
      expect(w).toBe(0);
      expect(e).toBe(0);
    }
    expect(alarms(worker.lines)).toEqual([]);
    expect(alarms(consumer.lines)).toEqual([]);

    const stored = (await readStream(c.url, stream)).map((e) => e.msgId!);
    const twice = stored.filter((id, i) => stored.indexOf(id) !== i);
    expect(twice).toEqual([]);
    expect(stored.sort()).toEqual(await relayedMessageIds());
    expect(await ledgerDifferences(t.db.db, 'earnings')).toEqual([]);
    // The wiped node holds the whole stream again, from the others: its own copy, asked of it.
    const info = await c.waitForStream(stream);
    expect(await c.replicaOf(wiped, stream)).toEqual({ lastSeq: info.state.last_seq, messages: info.state.messages });
  }, 240_000);

  it('hands the stream to another node when its leader is asked to step down, as the relay asks of a stuck one', async () => {
    const c = cluster!;
    await c.waitForStream(stream);
    const leader = await c.streamLeader(stream);
    expect(await askStreamLeaderToStepDown(c.nc, stream, 5_000)).toBeNull();
    await waitFor(async () => (await c.streamLeader(stream)) !== leader || undefined, 15_000, 'another node leads the stream');
    // A stream the cluster does not have: refused, said so, not thrown.
    expect(await askStreamLeaderToStepDown(c.nc, freshStream('X'), 5_000)).toMatch(/^refused: .*not found/);
  }, 30_000);
});
