import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import readline from 'node:readline';
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { headers as natsHeaders, connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { daysFromNow, listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { eventsEnv, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * Consumer groups and the earnings ledger against a real nats-server: bookings made through the
 * API, relayed by the worker, consumed by `consume:earnings`. The ledger must equal what SQL
 * computes from the bookings table, through a consumer killed inside its transaction, a replay,
 * and a second group.
 *
 * Slow (about 14 s alone): the worker and `consume:earnings` run as processes, one killed inside
 * its transaction and started again.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const skip = skipWithoutNats();
const STREAM = 'EARN';
const t = useTestApp();
const nats = useNats(skip);
let hosts: Session[] = [];

const env = (extra: Record<string, string> = {}) => eventsEnv(t.db.url, nats.url, STREAM, { EVENTS_ACK_WAIT_SECONDS: '1', ...extra });

async function consume(argv: string[], extra: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await earningsMain({ argv, env: env(extra), out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out, err };
}

/** Bookings by a guest on each host's properties in two currencies (3 per property, 1 cancelled). */
async function makeBookings(round: number, forHosts: Session[] = hosts) {
  const guest = await signUp(t.app, 'guest');
  for (const [h, host] of forHosts.entries()) {
    for (const currency of ['EUR', 'USD']) {
      const p = await listProperty(t.app, host, { currency, nightlyPrice: 1000 * (h + 1) + round });
      for (let i = 0; i < 3; i++) {
        const res = await t.app.inject({
          method: 'POST',
          url: '/bookings',
          headers: guest.auth,
          payload: { propertyId: p.id, checkIn: daysFromNow(10 + i * 5), checkOut: daysFromNow(12 + i * 5), guests: 1 },
        });
        expect(res.statusCode).toBe(201);
        if (i === 1) {
          const c = await t.app.inject({ method: 'POST', url: `/bookings/${res.json().id}/cancel`, headers: guest.auth });
          expect(c.statusCode).toBe(200);
        }
      }
    }
  }
}

async function relayAll() {
  const code = await drainOutbox({ argv: ['--until-empty'], env: env({ WORKER_CONCURRENCY: '16' }), out: () => {}, err: () => {} });
  expect(code).toBe(0);
}

/**
 * A consumer group of the test's own, created and caught up with the whole stream: each test
 * starts from a ledger it made itself, whichever tests ran before it (or none).
 */
async function caughtUpGroup(name: string): Promise<string> {
  const group = `${name}-${Math.random().toString(36).slice(2, 8)}`;
  const r = await consume(['--group', group, '--until-empty']);
  expect(r.code, r.err.join('\n')).toBe(0);
  expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
  return group;
}

async function ledger(group: string) {
  const { rows } = await t.db.db.execute(sql`
    select host_id::int, currency, confirmed_total::int, cancelled_total::int, bookings, cancellations
      from host_earnings where consumer_group = ${group} order by host_id, currency`);
  return rows;
}

async function groupInfo(group: string) {
  const nc = await connect({ servers: nats.url.replace('nats://', '') });
  try {
    const c = await (await jetstreamManager(nc)).consumers.info(STREAM, group);
    return { delivered: c.delivered.stream_seq, ackFloor: c.ack_floor.stream_seq, pending: c.num_pending };
  } finally {
    await nc.close();
  }
}

/*
 * Each test stands on its own (run one alone with -t): the shared setup only makes bookings and
 * relays them; every test that reads or changes a ledger uses a group of its own, caught up first.
 */
describe.skipIf(skip)('events consumers: the earnings ledger', () => {
  beforeAll(async () => {
    hosts = [await signUp(t.app, 'host'), await signUp(t.app, 'host'), await signUp(t.app, 'host')];
    await makeBookings(0);
    await relayAll();
  });

  it('keeps per host and currency the confirmed bookings minus cancellations, and serves it at GET /hosts/me/earnings', async () => {
    // A host of this test's own, so the counts below are what this test booked.
    const host = await signUp(t.app, 'host');
    await makeBookings(0, [host]);
    await relayAll();
    // The group the API serves.
    const r = await consume(['--until-empty']);
    expect(r.code).toBe(0);
    expect(await ledgerDifferences(t.db.db, 'earnings')).toEqual([]);

    const res = await t.app.inject({ method: 'GET', url: '/hosts/me/earnings', headers: host.auth });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.group).toBe('earnings');
    expect(body.earnings.map((e: { currency: string }) => e.currency)).toEqual(['EUR', 'USD']);
    const { rows: truth } = await t.db.db.execute<{ currency: string; net: string }>(sql`
      select b.currency, sum(b.total)::text as net from bookings b join properties p on p.id = b.property_id
        join users u on u.id = p.host_id
       where u.public_id = ${host.user.id} and b.status = 'confirmed' group by b.currency order by b.currency`);
    expect(body.earnings.map((e: { currency: string; net: string }) => ({ currency: e.currency, net: e.net }))).toEqual(truth);
    expect(body.earnings[0]).toMatchObject({ bookings: 3, cancellations: 1 });

    const guest = await signUp(t.app, 'guest');
    expect((await t.app.inject({ method: 'GET', url: '/hosts/me/earnings', headers: guest.auth })).statusCode).toBe(403);
  });

  it('applies the effect once when the consumer is killed inside its transaction', async () => {
    const group = await caughtUpGroup('killed-in-tx');
    await makeBookings(1);
    await relayAll();
    const before = await groupInfo(group);
    expect(before.pending).toBeGreaterThan(5);
    // Killed after its 4th effect was written, before that transaction's COMMIT.
    const killed = await runProcess(
      'test/helpers/earnings-entry.ts',
      ['--group', group, '--until-empty'],
      env({ TEST_KILL_IN_TX_AFTER: '4' }),
    );
    expect(killed.signal).toBe('SIGKILL');
    const killedIn = killed.lines
      .find((l) => l.startsWith('killing inside the transaction of '))!
      .split(' ')
      .pop()!;
    const { rows: seen } = await t.db.db.execute(
      sql`select 1 from processed_messages where consumer_group = ${group} and message_id = ${killedIn}`,
    );
    expect(seen).toHaveLength(0); // rolled back with the effect

    // Restarted: the unacked event comes back after the ack wait (1 s) and is applied once.
    const again = await consume(['--group', group, '--until-empty']);
    expect(again.code).toBe(0);
    expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
    const { rows: once } = await t.db.db.execute(
      sql`select 1 from processed_messages where consumer_group = ${group} and message_id = ${killedIn}`,
    );
    expect(once).toHaveLength(1);
  }, 60_000);

  it('applies the effect once when the consumer is killed after its COMMIT, before the ack', async () => {
    const group = await caughtUpGroup('killed-before-ack');
    await makeBookings(2);
    await relayAll();
    const killed = await runProcess(
      'test/helpers/earnings-entry.ts',
      ['--group', group, '--until-empty'],
      env({ TEST_KILL_BEFORE_ACK_AFTER: '3' }),
    );
    expect(killed.signal).toBe('SIGKILL');
    const killedAt = killed.lines
      .find((l) => l.startsWith('killing before the ack of '))!
      .split(' ')
      .pop()!;
    const { rows: seen } = await t.db.db.execute(
      sql`select 1 from processed_messages where consumer_group = ${group} and message_id = ${killedAt}`,
    );
    expect(seen).toHaveLength(1); // committed: the redelivery must find it and do nothing
    expect((await consume(['--group', group, '--until-empty'])).code).toBe(0);
    expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
  }, 60_000);

  it('skips redelivered events through the inbox (replay from a time keeps ledger and inbox)', async () => {
    const group = await caughtUpGroup('replay-from');
    const before = await ledger(group);
    expect(before.length).toBeGreaterThan(0);
    const r = await consume(['--group', group, '--replay', '--from', '2000-01-01T00:00:00Z', '--until-empty']);
    expect(r.code).toBe(0);
    expect(await ledger(group)).toEqual(before); // every event redelivered, none applied twice
  });

  it('--replay rebuilds the same ledger from the start of the stream', async () => {
    const group = await caughtUpGroup('rebuild');
    const before = await ledger(group);
    // Spoil it, so only a real rebuild can bring it back.
    await t.db.db.execute(sql`update host_earnings set confirmed_total = 0, bookings = 0 where consumer_group = ${group}`);
    expect(await ledgerDifferences(t.db.db, group)).not.toEqual([]);
    const r = await consume(['--group', group, '--replay', '--until-empty']);
    expect(r.code).toBe(0);
    expect(await ledger(group)).toEqual(before);
    expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
  });

  it('a second group reads the same stream without disturbing the first', async () => {
    const firstGroup = await caughtUpGroup('first');
    const first = await ledger(firstGroup);
    const firstPosition = await groupInfo(firstGroup);
    const second = `${firstGroup}-b`;
    const r = await consume(['--group', second, '--until-empty']);
    expect(r.code).toBe(0);
    expect(await ledgerDifferences(t.db.db, second)).toEqual([]);
    // …and a rebuild of the second group leaves the first alone too.
    await t.db.db.execute(sql`update host_earnings set cancelled_total = 0 where consumer_group = ${second}`);
    expect((await consume(['--group', second, '--replay', '--until-empty'])).code).toBe(0);
    expect(await ledgerDifferences(t.db.db, second)).toEqual([]);
    expect(await ledger(firstGroup)).toEqual(first);
    expect(await groupInfo(firstGroup)).toEqual(firstPosition);
    const { rows } = await t.db.db.execute<{ g: string; n: number }>(
      sql`select consumer_group as g, count(*)::int as n from processed_messages where consumer_group in (${firstGroup}, ${second}) group by 1 order by 1`,
    );
    expect(rows).toHaveLength(2);
    expect(rows[0]!.n).toBe(rows[1]!.n);
  });

  it('records an event that fails on its last delivery as a consumer dead letter, lists it, and replays it', async () => {
    const group = `dlq-${Math.random().toString(36).slice(2, 8)}`;
    // A booking of this run's own, written without an outbox row, and its event published by hand:
    // a true event (the ledger's checks pass) that no relay will publish a second time.
    const bookingId = randomUUID();
    const propertyId = randomUUID();
    const msgId = randomUUID();
    await t.db.db.execute(sql`
      insert into properties (public_id, host_id, title, city, country, currency, nightly_price, max_guests)
      select ${propertyId}, id, 'Dead letter flat', 'Porto', 'PT', 'EUR', 777, 2 from users where public_id = ${hosts[0]!.user.id}`);
    await t.db.db.execute(sql`
      insert into bookings (public_id, property_id, guest_id, check_in, check_out, guests, currency, nights, nightly_price, subtotal, cleaning_fee, service_fee, total)
      select ${bookingId}, p.id, p.host_id, current_date + 10, current_date + 11, 1, 'EUR', 1, 777, 777, 0, 0, 777
        from properties p where p.public_id = ${propertyId}`);
    const nc = await connect({ servers: nats.url.replace('nats://', '') });
    try {
      const h = natsHeaders();
      h.set('StayHub-Topic', 'booking.created');
      const body = { bookingId, propertyId, total: 777, currency: 'EUR' };
      const ack = await jetstream(nc).publish('earn.booking.created', JSON.stringify(body), { msgID: msgId, headers: h });
      expect(ack.duplicate).toBe(false);
    } finally {
      await nc.close();
    }

    // A failure no check can see (the database refusing, say), on every delivery: after the 2nd
    // it is dead-lettered; every other event of the stream goes through.
    const failing = (event: { messageId: string }) => {
      if (event.messageId === msgId) throw new Error('simulated outage of the ledger');
    };
    const r = await earningsMain({
      argv: ['--group', group, '--until-empty'],
      env: env({ EVENTS_MAX_DELIVER: '2' }),
      out: () => {},
      err: () => {},
      afterEffect: failing,
    });
    expect(r).toBe(0);
    const listed = await consume(['--group', group, '--dead']);
    expect(listed.out).toEqual([
      expect.stringMatching(new RegExp(`^${msgId}\\t.*booking.created\\t2 deliveries\\tError: simulated outage of the ledger`)),
    ]);
    const missing = await ledgerDifferences(t.db.db, group);
    expect(missing).toEqual([expect.objectContaining({ currency: 'EUR', ledger: expect.any(Number), truth: expect.any(Number) })]);
    expect(missing[0]!.truth - missing[0]!.ledger).toBe(777); // nothing applied for it

    // The cause gone, the dead letter replays into the ledger, once.
    const replayed = await consume(['--group', group, '--replay-dead']);
    expect(replayed.out).toEqual([`replayed dead letters of ${group}: 1 applied, 0 already applied, 0 still failing`]);
    expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
    expect((await consume(['--group', group, '--dead'])).out).toEqual([`none: group ${group} has no open dead letter`]);
    expect((await consume(['--group', group, '--replay-dead'])).out).toEqual([
      `replayed dead letters of ${group}: 0 applied, 0 already applied, 0 still failing`,
    ]);
  }, 60_000);

  it('dead-letters at its first delivery an event its booking contradicts (a PermanentError), and applies nothing', async () => {
    const group = await caughtUpGroup('forged');
    const before = await ledger(group);
    const msgId = randomUUID();
    // A real booking's event, with a total that is not the booking's.
    const { rows } = await t.db.db.execute<{ booking: string; property: string }>(sql`
      select b.public_id as booking, p.public_id as property from bookings b join properties p on p.id = b.property_id
       where b.status = 'confirmed' and b.currency = 'EUR' limit 1`);
    const nc = await connect({ servers: nats.url.replace('nats://', '') });
    let seq = 0;
    try {
      const h = natsHeaders();
      h.set('StayHub-Topic', 'booking.created');
      const body = { bookingId: rows[0]!.booking, propertyId: rows[0]!.property, total: 123_456_789, currency: 'EUR' };
      seq = (await jetstream(nc).publish('earn.booking.created', JSON.stringify(body), { msgID: msgId, headers: h })).seq;
    } finally {
      await nc.close();
    }
    try {
      expect((await consume(['--group', group, '--until-empty'])).code).toBe(0);
      const listed = await consume(['--group', group, '--dead']);
      expect(listed.out).toEqual([
        expect.stringMatching(
          new RegExp(
            `^${msgId}\\t.*\\t1 deliveries\\tPermanentError: earnings: booking.created for booking .* refused: the booking's total is`,
          ),
        ),
      ]);
      expect(await ledger(group)).toEqual(before);
    } finally {
      // Out of the log before other groups read it.
      const admin = await connect({ servers: nats.url.replace('nats://', '') });
      try {
        expect(await (await jetstreamManager(admin)).streams.deleteMessage(STREAM, seq)).toBe(true);
      } finally {
        await admin.close();
      }
    }
  }, 60_000);
});

describe.skipIf(skip)('events consumers: outages', () => {
  it('a running consumer rides out a nats-server restart and applies what was published after it', async () => {
    if (hosts.length === 0) hosts = [await signUp(t.app, 'host')];
    const child = spawn(process.execPath, entryArgs('src/commands/consume-earnings.ts'), {
      cwd: ROOT,
      env: { ...process.env, ...env({ LOG_LEVEL: process.env.DEBUG_EVENTS ? 'debug' : 'warn' }) },
      stdio: ['ignore', process.env.DEBUG_EVENTS ? 'inherit' : 'ignore', 'inherit'],
    });
    try {
      await makeBookings(3);
      await relayAll();
      await waitUntil(async () => (await ledgerDifferences(t.db.db, 'earnings')).length === 0, 'ledger caught up');
      await nats.stop();
      await new Promise((r) => setTimeout(r, 1500));
      await nats.start();
      await makeBookings(4);
      await relayAll();
      await waitUntil(
        async () => (await ledgerDifferences(t.db.db, 'earnings')).length === 0,
        'ledger caught up after the restart',
        30_000,
      );
    } finally {
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  }, 90_000);
});

async function waitUntil(check: () => Promise<boolean>, what: string, timeoutMs = 20_000) {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function runProcess(entry: string, args: string[], envVars: Record<string, string>) {
  const { DATABASE_URL: _a, NATS_URL: _b, ...inherited } = process.env;
  const child = spawn(process.execPath, entryArgs(entry, ...args), {
    cwd: ROOT,
    env: { ...inherited, ...envVars },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (l) => lines.push(l));
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; lines: string[] }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal, lines })),
  );
}
