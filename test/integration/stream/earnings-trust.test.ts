import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { jetstream } from '@nats-io/jetstream';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { applyOnce } from '../../../src/events/handle-event.ts';
import { applyEarningsEvent } from '../../../src/events/earnings/ledger.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { PermanentError } from '../../../src/errors.ts';
import { book, listProperty, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { consumedEvent, skipWithoutNats, startNats, type NatsServer } from '../../helpers/nats.ts';

/*
 * The earnings consumer does not trust the stream: an event is applied only if the bookings table
 * says the same (booking, property, total, currency, and for a cancellation a cancelled booking).
 * Anything else is a PermanentError, which the consumer dead-letters at its first delivery. And
 * GET /hosts/me/earnings answers whatever the sums have grown to, exactly, as strings.
 */

const t = useTestApp();
const log = pino({ level: 'silent' });
let host: Session;
let otherHost: Session;
let guest: Session;
/** A real booking's published body, the template each forgery below changes one field of. */
let created: { bookingId: string; propertyId: string; total: number; currency: string };
let otherPropertyId: string;

beforeAll(async () => {
  [host, otherHost, guest] = await Promise.all([signUp(t.app, 'host'), signUp(t.app, 'host'), signUp(t.app, 'guest')]);
  const p = await listProperty(t.app, host, { currency: 'EUR', nightlyPrice: 12_300 });
  otherPropertyId = (await listProperty(t.app, otherHost, { currency: 'EUR' })).id;
  const res = await book(t.app, guest, { propertyId: p.id, inDays: 20, nights: 3, guests: 2 });
  expect(res.statusCode).toBe(201);
  const b = res.json();
  created = { bookingId: b.id, propertyId: p.id, total: b.price.total, currency: b.price.currency };
  expect(created.total).toBeGreaterThan(0);
});

const apply = (group: string, topic: string, body: unknown) =>
  applyOnce(t.db.db, group, consumedEvent(topic, body), applyEarningsEvent(group), log);

async function ledgerRows(group: string) {
  const { rows } = await t.db.db.execute(sql`
    select h.currency, h.confirmed_total::text as confirmed, h.cancelled_total::text as cancelled, h.bookings, h.cancellations, u.public_id as host
      from host_earnings h join users u on u.id = h.host_id where h.consumer_group = ${group} order by u.public_id, h.currency`);
  return rows;
}

describe('the earnings handler checks each event against the bookings table', () => {
  it('applies an event that matches its booking', async () => {
    const group = `ok-${randomUUID().slice(0, 8)}`;
    expect(await apply(group, 'booking.created', created)).toBe('applied');
    expect(await ledgerRows(group)).toEqual([
      { currency: 'EUR', confirmed: String(created.total), cancelled: '0', bookings: 1, cancellations: 0, host: host.user.id },
    ]);
  });

  it.each([
    ['a booking that does not exist', 'booking.created', () => ({ ...created, bookingId: randomUUID() }), /no such booking/],
    [
      'another amount (123,456,789)',
      'booking.created',
      () => ({ ...created, total: 123_456_789 }),
      /total is \d+ EUR, the event says 123456789 EUR/,
    ],
    [
      'a total of MAX_SAFE_INTEGER',
      'booking.created',
      () => ({ ...created, total: Number.MAX_SAFE_INTEGER }),
      /the event says 9007199254740991/,
    ],
    ['another currency', 'booking.created', () => ({ ...created, currency: 'USD' }), /the event says \d+ USD/],
    ["another host's property", 'booking.created', () => ({ ...created, propertyId: otherPropertyId }), /is on property/],
    ['a property that does not exist', 'booking.created', () => ({ ...created, propertyId: randomUUID() }), /is on property/],
    [
      'a cancellation of a confirmed booking',
      'booking.cancelled',
      () => ({ ...created, cancelledBy: 'guest' }),
      /is confirmed, not cancelled/,
    ],
    ['a booking id that is not a uuid', 'booking.created', () => ({ ...created, bookingId: 'x' }), /body does not match: bookingId/],
  ])('refuses %s with a PermanentError, and changes nothing', async (_what, topic, forge, message) => {
    const group = `forged-${randomUUID().slice(0, 8)}`;
    const failure = await apply(group, topic, forge()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(PermanentError);
    expect((failure as Error).message).toMatch(message);
    expect(await ledgerRows(group)).toEqual([]);
    // Rolled back with the effect: a replay of the dead letter, once fixed, is not taken for a duplicate.
    const { rows } = await t.db.db.execute(sql`select 1 from processed_messages where consumer_group = ${group}`);
    expect(rows).toEqual([]);
  });

  it('applies a cancellation once the booking is cancelled, and the creation read after it still matches', async () => {
    const group = `cancel-${randomUUID().slice(0, 8)}`;
    const p = await listProperty(t.app, host, { currency: 'EUR', nightlyPrice: 7_700 });
    const res = await book(t.app, guest, { propertyId: p.id, inDays: 40, nights: 2 });
    const b = res.json();
    expect((await t.app.inject({ method: 'POST', url: `/bookings/${b.id}/cancel`, headers: guest.auth })).statusCode).toBe(200);
    const body = { bookingId: b.id, propertyId: p.id, total: b.price.total, currency: 'EUR' };
    expect(await apply(group, 'booking.created', body)).toBe('applied');
    expect(await apply(group, 'booking.cancelled', { ...body, cancelledBy: 'guest' })).toBe('applied');
    expect(await ledgerRows(group)).toEqual([
      {
        currency: 'EUR',
        confirmed: String(b.price.total),
        cancelled: String(b.price.total),
        bookings: 1,
        cancellations: 1,
        host: host.user.id,
      },
    ]);
  });
});

describe('GET /hosts/me/earnings with sums past 2^53', () => {
  it('answers 200 with the exact amounts as decimal strings, a negative net included', async () => {
    const rich = await signUp(t.app, 'host');
    // Written directly: no event the consumer accepts can make these, but a ledger kept for long
    // enough (or one filled before the checks above existed) can hold them.
    await t.db.db.execute(sql`
      insert into host_earnings (consumer_group, host_id, currency, confirmed_total, cancelled_total, bookings, cancellations)
      select ${t.config.EVENTS_EARNINGS_GROUP}, id, c.currency, c.confirmed, c.cancelled, 2, 1
        from users, (values ('EUR', 9223372036854775807, 9007199254740993), ('USD', 5, 9223372036854775807)) as c(currency, confirmed, cancelled)
       where public_id = ${rich.user.id}`);
    const res = await t.app.inject({ method: 'GET', url: '/hosts/me/earnings', headers: rich.auth });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().earnings.map(({ updatedAt: _u, ...line }: Record<string, unknown>) => line)).toEqual([
      {
        currency: 'EUR',
        confirmed: '9223372036854775807',
        cancelled: '9007199254740993',
        net: '9214364837600034814',
        bookings: 2,
        cancellations: 1,
      },
      { currency: 'USD', confirmed: '5', cancelled: '9223372036854775807', net: '-9223372036854775802', bookings: 2, cancellations: 1 },
    ]);
  });

  it('documents the amounts as strings in the OpenAPI schema', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const line = doc.paths['/hosts/me/earnings'].get.responses['200'].content['application/json'].schema.properties.earnings.items;
    for (const field of ['confirmed', 'cancelled', 'net'])
      expect(line.properties[field]).toMatchObject({ type: 'string', pattern: '^-?\\d+$' });
  });
});

const skip = skipWithoutNats();

describe.skipIf(skip)('the earnings consumer and a forged event on the stream', () => {
  let nats: NatsServer;
  beforeAll(async () => {
    nats = await startNats();
  });
  afterAll(async () => {
    await nats?.destroy();
  });

  it('dead-letters it at its first delivery, whatever EVENTS_MAX_DELIVER, and credits nobody', async () => {
    const group = `forged-${randomUUID().slice(0, 8)}`;
    const msgId = randomUUID();
    const nc = await connect({ servers: nats.url.replace('nats://', '') });
    try {
      const h = natsHeaders();
      h.set('StayHub-Topic', 'booking.created');
      // The stream exists once a consumer has started: the first run creates it.
      const env = {
        DATABASE_URL: t.db.url,
        NATS_URL: nats.url,
        EVENTS_STREAM: 'FORGED',
        EVENTS_SUBJECT_PREFIX: 'forged',
        EVENTS_MAX_DELIVER: '5',
        LOG_LEVEL: 'silent',
        MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
      };
      const consume = async (argv: string[]) => {
        const out: string[] = [];
        const err: string[] = [];
        const code = await earningsMain({ argv: ['--group', group, ...argv], env, out: (l) => out.push(l), err: (l) => err.push(l) });
        expect(code, err.join('\n')).toBe(0);
        return out;
      };
      await consume(['--until-empty']);
      await jetstream(nc).publish('forged.booking.created', JSON.stringify({ ...created, total: 123_456_789 }), {
        msgID: msgId,
        headers: h,
      });
      await consume(['--until-empty']);
      expect(await consume(['--dead'])).toEqual([
        expect.stringMatching(
          new RegExp(
            `^${msgId}\\t.*booking.created\\t1 deliveries\\tPermanentError: earnings: booking.created for booking ${created.bookingId} refused`,
          ),
        ),
      ]);
      expect(await ledgerRows(group)).toEqual([]);
    } finally {
      await nc.close();
    }
  });
});
