import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { parseSince, reconcileMain } from '../../../src/events/reconcile.ts';
import { UsageError } from '../../../src/process/run-main.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { bookStays, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { eventsEnv, freshStream, readStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { bookingPayload } from '../../../scripts/lib/booking-payload.ts';
import { sleep } from '../../helpers/wait.ts';

/*
 * The outbox is the source of truth for the stream: `events:reconcile` finds the events the relay
 * stored that the stream no longer holds and publishes them again; and a stream recreated after
 * events were relayed into an earlier one is not complete for a replay.
 *
 * A one-second duplicate window (MAX_ATTEMPTS=1 and LEASE_SECONDS=1 make the retry span that
 * short) lets a test get past it: a message deleted inside the window cannot be stored again.
 */

const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip, { client: true });
let stream = 'R';
beforeEach(() => {
  stream = freshStream('R');
});

const env = (extra: Record<string, string> = {}) =>
  eventsEnv(t.db.url, nats.url, stream, {
    EVENTS_ACK_WAIT_SECONDS: '1',
    MAX_ATTEMPTS: '1',
    LEASE_SECONDS: '1',
    EVENTS_DUPLICATE_WINDOW_SECONDS: '1',
    LOG_LEVEL: process.env.DEBUG_EVENTS ? 'debug' : 'warn',
    ...extra,
  });

async function run(main: typeof reconcileMain, argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main({ argv, env: env(), out: (l) => out.push(l), err: (l) => err.push(l), exitOnForcedStop: false });
  return { code, out: out.join('\n'), err: err.join('\n') };
}
const reconcile = (since = '10m') => run(reconcileMain, ['--since', since]);
const consume = (group: string, argv: string[] = []) => run(earningsMain, ['--group', group, '--until-empty', ...argv]);

async function relay() {
  expect(await drainOutbox({ argv: ['--until-empty'], env: env(), out: () => {}, err: () => {} })).toBe(0);
}

/** `n` confirmed bookings on a new property of `host`; their booking ids. */
async function book(host: Session, n: number): Promise<string[]> {
  return (await bookStays(t.app, host, n, { nightlyPrice: 7_000 })).bookings.map((b) => b.id);
}

/** The host's line in the group's ledger against the bookings table: [ledger, truth]. */
async function hostLine(group: string, host: Session) {
  const { rows } = await t.db.db.execute<{ counted: number | null; net: number | null; bookings: number; total: number }>(sql`
    select (select h.bookings from host_earnings h where h.consumer_group = ${group} and h.host_id = u.id and h.currency = 'EUR') as counted,
           (select (h.confirmed_total - h.cancelled_total)::int from host_earnings h
             where h.consumer_group = ${group} and h.host_id = u.id and h.currency = 'EUR') as net,
           (select count(*)::int from bookings b join properties p on p.id = b.property_id where p.host_id = u.id) as bookings,
           (select coalesce(sum(b.total), 0)::int from bookings b join properties p on p.id = b.property_id where p.host_id = u.id) as total
      from users u where u.public_id = ${host.user.id}`);
  const r = rows[0]!;
  return { ledger: { bookings: r.counted, net: r.net }, truth: { bookings: r.bookings, net: r.total } };
}

/** The Nats-Msg-Id of each booking.created event the stream holds. */
const createdIds = async () =>
  (await readStream(nats.url, stream)).filter((e) => e.subject.endsWith('.booking.created')).map((e) => e.msgId);

describe('events:reconcile --since', () => {
  it('takes an ISO time with its zone or a duration back from now; anything else is a usage error', () => {
    const now = new Date('2027-01-05T12:00:00Z');
    expect(parseSince('2h', now).toISOString()).toBe('2027-01-05T10:00:00.000Z');
    expect(parseSince('90s', now).toISOString()).toBe('2027-01-05T11:58:30.000Z');
    expect(parseSince('7d', now).toISOString()).toBe('2026-12-29T12:00:00.000Z');
    expect(parseSince('2027-01-05T09:30:00+01:00', now).toISOString()).toBe('2027-01-05T08:30:00.000Z');
    for (const bad of [undefined, '', '2', '2 h', '-2h', '0h', '2027-01-05T09:30:00', 'yesterday', '2027-02-01T00:00:00Z']) {
      expect(() => parseSince(bad, now), String(bad)).toThrow(UsageError);
    }
  });

  it('a bad value exits 2 naming the flag', async () => {
    const r = await run(reconcileMain, ['--since', 'soon']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--since .*"soon"/);
  });
});

describe.skipIf(skip)('events:reconcile', () => {
  it('publishes again the events deleted from the stream by hand, once past the duplicate window; the ledger then equals the bookings table', async () => {
    const group = `rec-${randomUUID().slice(0, 6)}`;
    const host = await signUp(t.app, 'host');
    // The group exists before the events, so it reads whatever the stream holds when it runs.
    expect((await consume(group)).code).toBe(0);
    const bookings = await book(host, 6);
    await relay();
    const stored = await readStream(nats.url, stream);
    const created = stored.filter((e) => e.subject.endsWith('.booking.created'));
    expect(created).toHaveLength(6);
    const deleted = [created[1]!, created[3]!, created[4]!];
    for (const e of deleted) await nats.jsm.streams.deleteMessage(stream, e.seq);

    // Inside the duplicate window: the server still remembers their ids and stores nothing.
    const early = await reconcile();
    expect(early.code, early.err).toBe(1);
    expect(early.out).toContain(
      `${stored.length} checked, ${stored.length - 3} present, 0 republished, 3 missing but inside the duplicate window`,
    );
    await sleep(2500);

    const r = await reconcile();
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain(`events:reconcile: ${stored.length} checked, ${stored.length - 3} present, 3 republished, 0 missing`);
    expect(r.out).toContain('0 could not be republished');
    expect((await createdIds()).sort()).toEqual(created.map((e) => e.msgId).sort());

    // Nothing missing any more: a second run republishes nothing.
    const again = await reconcile();
    expect(again.code, again.err).toBe(0);
    expect(again.out).toContain(`${stored.length} checked, ${stored.length} present, 0 republished`);

    expect((await consume(group)).code).toBe(0);
    const { ledger, truth } = await hostLine(group, host);
    expect(truth.bookings).toBe(bookings.length);
    expect(ledger).toEqual(truth);
  }, 90_000);

  it("counts a relay lane message's event under its original's id, and not an original whose lane has not published it", async () => {
    const started = new Date(Date.now() - 1000).toISOString();
    const payload = JSON.stringify(bookingPayload());
    // Two originals the relay moved to its lane (events.relay in handlers_done): A's lane message
    // still waits (PENDING), B's published (DONE). Only B's event is in the stream, by the outbox.
    const { rows } = await t.db.db.execute<{ public_id: string; name: string }>(sql`
      insert into outbox (topic, key, payload, status, handlers_done, processed_at)
      values ('booking.created', 'A', ${payload}::jsonb, 'DONE', '{events.relay}', now()),
             ('booking.created', 'B', ${payload}::jsonb, 'DONE', '{events.relay}', now())
      returning public_id::text, key as name`);
    const id = (name: string) => rows.find((r) => r.name === name)!.public_id;
    await t.db.db.execute(sql`
      insert into outbox (topic, key, payload, status, lane, origin_id, processed_at)
      values ('booking.created', 'events.relay@A', ${payload}::jsonb, 'PENDING', 'events.relay', ${id('A')}::uuid, null),
             ('booking.created', 'events.relay@B', ${payload}::jsonb, 'DONE', 'events.relay', ${id('B')}::uuid, now())`);
    try {
      const r = await reconcile(started);
      expect(r.code, r.err).toBe(0);
      expect(r.out).toContain('events:reconcile: 1 checked, 0 present, 1 republished, 0 missing');
      const stored = await readStream(nats.url, stream);
      expect(stored.map((e) => [e.msgId, e.headers['StayHub-Key']])).toEqual([[id('B'), 'B']]);
    } finally {
      await t.db.db.execute(sql`delete from outbox where key in ('A', 'B', 'events.relay@A', 'events.relay@B')`);
    }
  }, 30_000);

  it('a stream the relay recreated: --replay is refused (exit 3) naming why, --accept-gap runs, and reconcile puts the old events back', async () => {
    const group = `rcr-${randomUUID().slice(0, 6)}`;
    const started = new Date(Date.now() - 1000).toISOString();
    const host = await signUp(t.app, 'host');
    const first = await book(host, 3);
    await relay();
    await nats.jsm.streams.delete(stream);
    await book(host, 2);
    await relay(); // its first publish finds no stream: the relay recreates it
    const { state, created } = await nats.jsm.streams.info(stream);
    expect(state.first_seq).toBe(1);
    expect(state.num_deleted ?? 0).toBe(0);

    const refused = await consume(group, ['--replay']);
    expect(refused.code, refused.err).toBe(3);
    expect(refused.err).toContain(`refusing --replay of group ${group}: stream ${stream} no longer holds every event`);
    expect(refused.err).toContain(`it was created ${new Date(created).toISOString()}`);
    expect(refused.err).toMatch(/after the outbox had relayed events into an earlier stream/);
    // A new group starting at the stream's first event is refused too.
    expect((await consume(`${group}-new`)).code).toBe(3);

    const accepted = await consume(group, ['--replay', '--accept-gap']);
    expect(accepted.code, accepted.err).toBe(0);
    const { ledger, truth } = await hostLine(group, host);
    expect(ledger).toEqual(truth);

    // The outbox knows the four events the old stream took with it: a property's and three bookings'
    // (the stream holds the other property's and two bookings').
    const r = await reconcile(started);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain('events:reconcile: 7 checked, 3 present, 4 republished, 0 missing');
    const ids = await createdIds();
    const { rows } = await t.db.db.execute<{ public_id: string }>(
      sql`select public_id::text from outbox where topic = 'booking.created' and payload->>'bookingId' = any(${sql.param(first)}::text[])`,
    );
    expect(ids).toEqual(expect.arrayContaining(rows.map((x) => x.public_id)));
    expect(ids).toHaveLength(5);
  }, 90_000);
});
