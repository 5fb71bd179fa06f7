import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { backfillMain } from '../../../src/commands/events-backfill.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { daysFromNow, listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { readStream, skipWithoutNats, startNats, useNats } from '../../helpers/nats.ts';

/*
 * `npm run events:backfill` against a real nats-server: bookings made while no relay was
 * configured (no NATS_URL), their messages settled by the worker, then published into the stream
 * by the backfill, once each, in outbox order, exactly as the relay publishes them.
 */

const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip);
let guest: Session;
let propertyId: string;
/** After the property was listed, before the first booking: the window starts here. */
let since: Date;

beforeAll(async () => {
  if (skip) return;
  const host = await signUp(t.app, 'host');
  guest = await signUp(t.app, 'guest');
  propertyId = (await listProperty(t.app, host)).id;
  await sleep(20); // created_at of the property's message strictly before `since`
  since = new Date();
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push(await book(10 + i * 5));
  const c = await t.app.inject({ method: 'POST', url: `/bookings/${ids[1]}/cancel`, headers: guest.auth });
  expect(c.statusCode).toBe(200);
  // No NATS_URL: the worker sends the emails and indexes, relays nothing, and settles every message.
  expect(await drain({})).toBe(0);
  // A dead letter is settled too: its event is a fact all the same.
  await t.db.db.execute(sql`update outbox set status = 'DEAD', last_error = 'test' where topic = 'booking.cancelled'`);
});

async function book(inDays: number): Promise<string> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/bookings',
    headers: guest.auth,
    payload: { propertyId, checkIn: daysFromNow(inDays), checkOut: daysFromNow(inDays + 2), guests: 1 },
  });
  expect(res.statusCode).toBe(201);
  return res.json().id as string;
}

const env = (stream: string, extra: Record<string, string> = {}): Record<string, string> => ({
  DATABASE_URL: t.db.url,
  NATS_URL: nats.url,
  EVENTS_STREAM: stream,
  EVENTS_SUBJECT_PREFIX: stream.toLowerCase(),
  LOG_LEVEL: 'warn',
  POLL_INTERVAL_MS: '50',
  MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
  ...extra,
});

async function drain(extra: Record<string, string>, stream?: string): Promise<number> {
  const e = stream ? env(stream, extra) : { ...env('UNUSED'), NATS_URL: '', ...extra };
  return drainOutbox({ argv: ['--until-empty'], env: e, out: () => {}, err: () => {} });
}

async function backfill(stream: string, argv: string[], extra: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await backfillMain({
    argv,
    env: env(stream, extra),
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    exitOnForcedStop: false,
  });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/** The earnings consumer, as a group of its own, over the whole stream: the ledger it then holds. */
async function consumeAll(stream: string, group: string, extra: Record<string, string> = {}) {
  const err: string[] = [];
  const code = await earningsMain({
    argv: ['--until-empty', '--group', group],
    env: env(stream, extra),
    out: () => {},
    err: (l) => err.push(l),
    exitOnForcedStop: false,
  });
  expect(code, err.join('\n')).toBe(0);
  return ledgerDifferences(t.db.db, group);
}

async function outboxRows(topics: string[], after: Date) {
  const { rows } = await t.db.db.execute<{ public_id: string; topic: string; key: string; status: string; created_at_ms: number }>(sql`
    select public_id, topic, key, status, (extract(epoch from created_at) * 1000)::float8 as created_at_ms
      from outbox where topic = any(${sql.param(topics)}::text[]) and created_at >= ${after.toISOString()}::timestamptz order by id`);
  return rows;
}

async function streamExists(stream: string): Promise<boolean> {
  const nc = await connect({ servers: nats.url.replace('nats://', '') });
  try {
    const jsm = await jetstreamManager(nc);
    return await jsm.streams.info(stream).then(
      () => true,
      () => false,
    );
  } finally {
    await nc.close();
  }
}

describe.skipIf(skip)('events:backfill', () => {
  it('refuses a --since that is not a time: exit 2, naming the flag', async () => {
    const r = await backfill('BAD', ['--since', 'last tuesday']);
    expect(r.code).toBe(2);
    expect(r.err.split('\n')[0]).toMatch(/^events:backfill: --since is not an ISO 8601 date or time/);
    expect((await backfill('BAD', [])).err).toMatch(/--since is required/);
  });

  it('names a NATS server without JetStream as such: exit 1, one line', async () => {
    const plain = await startNats({ jetstream: false });
    try {
      const r = await backfill('PLAIN', ['--since', since.toISOString()], { NATS_URL: plain.url });
      expect(r.code).toBe(1);
      expect(r.err).toBe(
        `events:backfill: the NATS server at 127.0.0.1:${plain.port} does not run JetStream: start it with -js (nats-server -js -sd DIR)`,
      );
    } finally {
      await plain.destroy();
    }
  });

  it('--dry-run counts what it would publish and publishes nothing', async () => {
    const r = await backfill('DRY', ['--since', since.toISOString(), '--dry-run']);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/dry run, nothing published: 4 to publish \(booking\.created 3, booking\.cancelled 1\)/);
    const onlyCancelled = await backfill('DRY', ['--since', since.toISOString(), '--topic', 'booking.cancelled', '--dry-run']);
    expect(onlyCancelled.out).toMatch(/: 1 to publish \(booking\.cancelled 1\)/);
    expect(await streamExists('DRY')).toBe(false);
  });

  it('publishes one event per booking message, oldest first; a second run finds them all already there', async () => {
    const messages = await outboxRows(['booking.created', 'booking.cancelled'], since);
    expect(messages.map((m) => m.status)).toEqual(['DONE', 'DONE', 'DONE', 'DEAD']); // settled before the backfill

    const first = await backfill('BF', ['--since', since.toISOString()]);
    expect(first.code, first.err).toBe(0);
    expect(first.out).toMatch(/^events:backfill: 4 published, 0 duplicates \(already in the stream\), 0 failed/);
    const events = await readStream(nats.url, 'BF');
    expect(events.map((e) => e.msgId)).toEqual(messages.map((m) => m.public_id));
    for (const [i, e] of events.entries()) {
      const m = messages[i]!;
      expect(e.subject).toBe(`bf.${m.topic}`);
      expect(e.headers).toMatchObject({
        'StayHub-Topic': m.topic,
        'StayHub-Key': m.key,
        'StayHub-Outbox-Id': m.public_id,
        'StayHub-Occurred-At': new Date(m.created_at_ms).toISOString(),
        'StayHub-Schema-Version': '1',
      });
      expect(e.body).toMatchObject({ propertyId });
      expect(e.body).not.toHaveProperty('guestEmail');
    }

    const second = await backfill('BF', ['--since', since.toISOString()]);
    expect(second.code, second.err).toBe(0);
    expect(second.out).toMatch(/^events:backfill: 0 published, 4 duplicates \(already in the stream\), 0 failed/);
    expect(await readStream(nats.url, 'BF')).toEqual(events);

    // What the earnings consumer makes of them: the bookings table's own sums.
    expect(await consumeAll('BF', 'bf')).toEqual([]);
  });

  it('past the duplicate window, publishes again, and the earnings consumer skips the copies by message id', async () => {
    // A one-second duplicate window (the retry span allows it with one attempt and a one-second lease).
    const short = { MAX_ATTEMPTS: '1', LEASE_SECONDS: '1', EVENTS_DUPLICATE_WINDOW_SECONDS: '1' };
    expect((await backfill('WIN', ['--since', since.toISOString()], short)).out).toMatch(/: 4 published, 0 duplicates/);
    await sleep(1_500);
    expect((await backfill('WIN', ['--since', since.toISOString()], short)).out).toMatch(/: 4 published, 0 duplicates/);
    const events = await readStream(nats.url, 'WIN');
    expect(events).toHaveLength(8);
    expect(new Set(events.map((e) => e.msgId)).size).toBe(4);
    expect(await consumeAll('WIN', 'win', short)).toEqual([]);
  });

  it('publishes what the relay publishes: same subject, headers and body for the same message', async () => {
    const later = new Date();
    await book(40);
    // The relay, into one stream; then the backfill of the same message, into another.
    expect(await drain({}, 'RELAYED')).toBe(0);
    const r = await backfill('BACKFILLED', ['--since', later.toISOString()]);
    expect(r.code, r.err).toBe(0);
    const [relayed] = await readStream(nats.url, 'RELAYED');
    const backfilled = await readStream(nats.url, 'BACKFILLED');
    expect(backfilled).toHaveLength(1);
    expect(relayed!.subject.replace(/^relayed\./, '')).toBe(backfilled[0]!.subject.replace(/^backfilled\./, ''));
    expect(backfilled[0]!.headers).toEqual(relayed!.headers);
    expect(backfilled[0]!.body).toEqual(relayed!.body);
  });

  it('--until ends the window, exclusive', async () => {
    const messages = await outboxRows(['booking.created', 'booking.cancelled'], since);
    const until = new Date(messages[2]!.created_at_ms);
    const r = await backfill('DRY', ['--since', since.toISOString(), '--until', until.toISOString(), '--dry-run']);
    expect(r.out).toMatch(/: 2 to publish \(booking\.created 2\)/);
  });
});
