import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import pino from 'pino';
import { beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { nanos } from '@nats-io/transport-node';
import { backfillMain } from '../../../src/commands/events-backfill.ts';
import { applyOnce } from '../../../src/events/handle-event.ts';
import { applyEarningsEvent, ledgerDifferences, rebuildLedger } from '../../../src/events/earnings/ledger.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import { createUser } from '../../../src/users/auth.service.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { bookStays, signUp, uniqueEmail, useTestApp, type Session } from '../../helpers/app.ts';
import { useTestDatabase } from '../../helpers/db.ts';
import { consumedEvent, eventsEnv, freshStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { waitFor } from '../../helpers/wait.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';

/*
 * The earnings ledger where the stream cannot tell the whole story: events aged out of it
 * (EVENTS_MAX_AGE_SECONDS) or deleted from it, and bookings made before the relay was enabled,
 * whose cancellation reaches the stream without their creation. The ledger must never end up
 * different from the bookings table without saying so: a replay that cannot see the stream's
 * beginning is refused, a rebuild from the bookings table (--replay --accept-gap) meets the
 * stream's events without counting anything twice, a cancellation of a booking the ledger does
 * not count counts its creation first, and a group that lost events is reported.
 *
 * Slow (about 14 s alone): every scenario runs the relay and the earnings consumer against a real
 * nats-server and waits for them to catch up.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip, { client: true });
const log = pino({ level: 'silent' });
let stream = 'GAP';
beforeEach(async () => {
  stream = freshStream('GAP');
  // Each test's stream stands for a new system's: the events earlier tests relayed (into their
  // own streams) would make it look created after them, and every replay would be refused.
  await t.db.db.execute(sql`delete from outbox where status = 'DONE'`);
});

const env = (extra: Record<string, string> = {}) =>
  eventsEnv(t.db.url, nats.url, stream, {
    EVENTS_ACK_WAIT_SECONDS: '1',
    LOG_LEVEL: process.env.DEBUG_EVENTS ? 'debug' : 'warn',
    ...extra,
  });

async function consume(group: string, argv: string[] = []) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await earningsMain({
    argv: ['--group', group, '--until-empty', ...argv],
    env: env(),
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    exitOnForcedStop: false,
  });
  return { code, out, err: err.join('\n') };
}

/** The worker relays every pending outbox message into the test's stream. */
async function relay() {
  const code = await drainOutbox({ argv: ['--until-empty'], env: env(), out: () => {}, err: () => {} });
  expect(code).toBe(0);
}

/** The worker without NATS_URL: emails and search, no relay; every message DONE, none published. */
async function settleWithoutRelay() {
  const code = await drainOutbox({ argv: ['--until-empty'], env: env({ NATS_URL: '' }), out: () => {}, err: () => {} });
  expect(code).toBe(0);
}

interface Booked {
  id: string;
  total: number;
  guest: Session;
}

/** `n` bookings on a new property of `host` (EUR), cancelling those whose index is in `cancel`. */
async function book(host: Session, n: number, cancel: number[] = []): Promise<Booked[]> {
  const { guest, bookings } = await bookStays(t.app, host, n, { nightlyPrice: 5_000 + Math.floor(Math.random() * 1000) });
  const made = bookings.map((b) => ({ ...b, guest }));
  for (const i of cancel) await cancelBooking(made[i]!);
  return made;
}

async function cancelBooking(b: Booked) {
  const res = await t.app.inject({ method: 'POST', url: `/bookings/${b.id}/cancel`, headers: b.guest.auth });
  expect(res.statusCode, res.body).toBe(200);
}

/** One host's line (EUR) in a group's ledger, or undefined. */
async function line(group: string, host: Session) {
  const { rows } = await t.db.db.execute<{
    confirmed: number;
    cancelled: number;
    net: number;
    bookings: number;
    cancellations: number;
  }>(sql`
    select h.confirmed_total::int as confirmed, h.cancelled_total::int as cancelled,
           (h.confirmed_total - h.cancelled_total)::int as net, h.bookings, h.cancellations
      from host_earnings h join users u on u.id = h.host_id
     where h.consumer_group = ${group} and u.public_id = ${host.user.id} and h.currency = 'EUR'`);
  return rows[0];
}

async function ledger(group: string) {
  const { rows } = await t.db.db.execute(sql`
    select host_id::int, currency, confirmed_total::int, cancelled_total::int, bookings, cancellations
      from host_earnings where consumer_group = ${group} order by host_id, currency`);
  return rows;
}

/**
 * Lets the stream's events age out as a short EVENTS_MAX_AGE_SECONDS would: a 1-second max age
 * until it holds none. The relay's next start sets the configured max age back.
 */
async function ageOut() {
  const { config } = await nats.jsm.streams.info(stream);
  await nats.jsm.streams.update(stream, { ...config, max_age: nanos(1000), duplicate_window: nanos(1000) });
  await waitFor(async () => (await nats.jsm.streams.info(stream)).state.messages === 0, 20_000, 'the events to age out');
}

/**
 * A stream that lost its beginning: `host`'s first bookings relayed and read by `group`, then aged
 * out; then more bookings relayed, which the stream holds and the group has not read.
 */
async function streamWithAgedOutEvents(group: string, host: Session) {
  const early = await book(host, 3, [1]);
  await relay();
  expect((await consume(group)).code).toBe(0);
  await ageOut();
  const late = await book(host, 2);
  await relay();
  const { state } = await nats.jsm.streams.info(stream);
  expect(state.first_seq).toBeGreaterThan(1);
  expect(state.messages).toBeGreaterThan(0);
  return { early, late, firstSeq: state.first_seq, firstAt: new Date(state.first_ts).toISOString() };
}

const group = (name: string) => `${name}-${randomUUID().slice(0, 6)}`;

/** `consume:earnings --group NAME` as a process of its own, running until stop(); its JSON log lines. */
function spawnConsumer(g: string, extra: Record<string, string> = {}) {
  const { DATABASE_URL: _a, NATS_URL: _b, ...inherited } = process.env;
  const child = spawn(process.execPath, entryArgs('src/commands/consume-earnings.ts', '--group', g), {
    cwd: ROOT,
    env: { ...inherited, ...env({ LOG_FORMAT: 'json', ...extra }) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Record<string, unknown>[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (l) => {
    try {
      lines.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      // not a log line
    }
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return {
    lines,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

describe.skipIf(skip)('the earnings ledger and events gone from the stream', () => {
  it('refuses --replay once events have aged out, naming where the stream starts and the two ways on; the ledger stays', async () => {
    const g = group('refused');
    const host = await signUp(t.app, 'host');
    const { firstSeq, firstAt } = await streamWithAgedOutEvents(g, host);
    const before = await ledger(g);
    expect(before.length).toBeGreaterThan(0);

    const r = await consume(g, ['--replay']);
    expect(r.code, r.err).toBe(3);
    expect(r.err).toContain(
      `consume:earnings: refusing --replay of group ${g}: stream ${stream} no longer holds every event: ` +
        `it starts at sequence ${firstSeq} (${firstAt}): ${firstSeq - 1} earlier event(s) aged out (EVENTS_MAX_AGE_SECONDS) or were purged.`,
    );
    expect(r.err).toContain('rebuild it from the bookings table instead (--replay --accept-gap)');
    expect(r.err).toContain(`(--replay --from ${firstAt})`);
    expect(await ledger(g)).toEqual(before);

    // A replay from a time before the stream's first event is refused too; from that event on, it runs.
    expect((await consume(g, ['--replay', '--from', '2000-01-01T00:00:00Z'])).code).toBe(3);
    expect(await ledger(g)).toEqual(before);
    const from = await consume(g, ['--replay', '--from', firstAt]);
    expect(from.code, from.err).toBe(0);
    expect((await line(g, host))!.bookings).toBe(5);
  }, 90_000);

  it('--replay --accept-gap rebuilds from the bookings table; the events still in the stream, and a replay after, count nothing twice', async () => {
    const g = group('rebuilt');
    const host = await signUp(t.app, 'host');
    const { early, late, firstAt } = await streamWithAgedOutEvents(g, host);
    // Spoiled, so only a real rebuild brings it back.
    await t.db.db.execute(sql`update host_earnings set confirmed_total = 1 where consumer_group = ${g}`);

    const r = await consume(g, ['--replay', '--accept-gap']);
    expect(r.code, r.err).toBe(0);
    expect(await ledgerDifferences(t.db.db, g)).toEqual([]);
    const { rows } = await t.db.db.execute<{ counted: number; bookings: number }>(sql`
      select (select count(*) from earnings_bookings where consumer_group = ${g})::int as counted,
             (select count(*) from bookings)::int as bookings`);
    expect(rows[0]!.counted).toBe(rows[0]!.bookings);
    const all = [...early, ...late].reduce((sum, b) => sum + b.total, 0);
    expect(await line(g, host)).toEqual({
      confirmed: all,
      cancelled: early[1]!.total,
      net: all - early[1]!.total,
      bookings: 5,
      cancellations: 1,
    });

    // The stream's events again, from its first: each already counted.
    const rebuilt = await ledger(g);
    const again = await consume(g, ['--replay', '--from', firstAt]);
    expect(again.code, again.err).toBe(0);
    expect(await ledger(g)).toEqual(rebuilt);

    // What happens next is counted: a cancellation of a booking whose creation aged out, a new booking.
    await cancelBooking(early[0]!);
    await book(host, 1);
    await relay();
    expect((await consume(g)).code).toBe(0);
    expect(await ledgerDifferences(t.db.db, g)).toEqual([]);
    expect((await line(g, host))!.bookings).toBe(6);
  }, 90_000);

  it('refuses to start a new group on a stream that lost its beginning; --replay --accept-gap builds it', async () => {
    const host = await signUp(t.app, 'host');
    await streamWithAgedOutEvents(group('first'), host);
    const fresh = group('fresh');
    const r = await consume(fresh);
    expect(r.code, r.err).toBe(3);
    expect(r.err).toMatch(
      new RegExp(
        `^consume:earnings: refusing to start group ${fresh}: it has no durable consumer on the stream, .* --replay --accept-gap\\.$`,
      ),
    );
    expect(await ledger(fresh)).toEqual([]);
    const built = await consume(fresh, ['--replay', '--accept-gap']);
    expect(built.code, built.err).toBe(0);
    expect(await ledgerDifferences(t.db.db, fresh)).toEqual([]);
  }, 90_000);

  it('--replay --accept-gap beside a running process of the group: it waits for the rebuild, and nothing counts twice', async () => {
    const g = group('beside');
    const host = await signUp(t.app, 'host');
    const first = await book(host, 3, [1]);
    await relay();
    const running = spawnConsumer(g);
    try {
      await waitFor(async () => (await line(g, host))?.bookings === 3, 30_000, 'the running process to count the first bookings');
      // As with `npm start` running: the rebuild deletes and recreates the group's durable under
      // it; the running process makes it again too, and goes on.
      const r = await consume(g, ['--replay', '--accept-gap']);
      expect(r.code, r.err).toBe(0);
      await cancelBooking(first[0]!);
      await book(host, 2, [0]);
      await relay();
      // The counts, not the net alone: that also matches while a new booking and its own
      // cancellation are both still to apply. Counted once each, never twice, then the totals.
      const counted = async () => {
        const l = await line(g, host);
        return l !== undefined && l.bookings + l.cancellations >= 8 ? l : undefined;
      };
      expect(await waitFor(counted, 30_000, 'every booking and cancellation counted')).toMatchObject({ bookings: 5, cancellations: 3 });
      expect(await ledgerDifferences(t.db.db, g)).toEqual([]);
    } finally {
      expect(await running.stop()).toBe(0);
    }
  }, 90_000);

  it('refuses --replay, from the start or from a time, when an event was deleted from inside the stream', async () => {
    const g = group('deleted');
    const host = await signUp(t.app, 'host');
    await book(host, 3);
    await relay();
    expect((await consume(g)).code).toBe(0);
    const before = await ledger(g);
    const { state } = await nats.jsm.streams.info(stream);
    expect(await nats.jsm.streams.deleteMessage(stream, state.last_seq - 1)).toBe(true);

    const r = await consume(g, ['--replay']);
    expect(r.code, r.err).toBe(3);
    expect(r.err).toContain(`stream ${stream} no longer holds every event: 1 event(s) were deleted from inside it.`);
    expect(r.err).toContain('(--replay --accept-gap), or keep the ledger as it is (start without --replay).');
    expect((await consume(g, ['--replay', '--from', '2000-01-01T00:00:00Z'])).code).toBe(3);
    expect(await ledger(g)).toEqual(before);
  }, 60_000);

  it('counts the creation first when a cancellation comes for a booking made before the relay: no negative line, and its backfilled creation counts nothing more', async () => {
    const g = group('before-relay');
    const host = await signUp(t.app, 'host');
    const since = new Date();
    // Made while no relay was configured: settled, never published.
    const old = await book(host, 2);
    await settleWithoutRelay();
    // The relay is enabled; the first booking is cancelled: the stream gets the cancellation only.
    await cancelBooking(old[0]!);
    await relay();
    const r = await consume(g);
    expect(r.code, r.err).toBe(0);
    expect(await line(g, host)).toEqual({ confirmed: old[0]!.total, cancelled: old[0]!.total, net: 0, bookings: 1, cancellations: 1 });
    const { rows } = await t.db.db.execute<{ counted_from: string; cancelled: boolean }>(sql`
      select e.counted_from, e.cancelled from earnings_bookings e join bookings b on b.id = e.booking_id
       where e.consumer_group = ${g} and b.public_id = ${old[0]!.id}`);
    expect(rows).toEqual([{ counted_from: 'gap', cancelled: true }]);

    // The backfill publishes both creations (and the cancellation again): only the second booking is new.
    const out: string[] = [];
    const code = await backfillMain({
      argv: ['--since', since.toISOString()],
      env: env(),
      out: (l) => out.push(l),
      err: (l) => out.push(l),
      exitOnForcedStop: false,
    });
    expect(code, out.join('\n')).toBe(0);
    expect((await consume(g)).code).toBe(0);
    expect(await line(g, host)).toEqual({
      confirmed: old[0]!.total + old[1]!.total,
      cancelled: old[0]!.total,
      net: old[1]!.total,
      bookings: 2,
      cancellations: 1,
    });
  }, 60_000);

  it('reports a group whose next event aged out before it read it: an error at start, and the metric until it stops', async () => {
    const g = group('behind');
    const host = await signUp(t.app, 'host');
    await streamWithAgedOutEvents(g, host); // read the first bookings only
    // More bookings the group does not read, aged out too; then one it will read.
    await book(host, 2);
    await relay();
    await ageOut();
    await book(host, 1);
    await relay();

    const child = spawnConsumer(g, { EVENTS_METRICS_PORT: '0', LOG_LEVEL: 'info' });
    const { lines } = child;
    try {
      const port = await waitFor(
        async () => lines.find((l) => l.msg === 'consumer metrics on /metrics')?.port as number | undefined,
        30_000,
        'the metrics port',
      );
      const lost = lines.find((l) => String(l.msg).startsWith(`group ${g} lost events`));
      expect(lost, JSON.stringify(lines)).toMatchObject({ level: 50, msg: expect.stringContaining('--replay --accept-gap') });
      const agedOut = async () => {
        const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        return text.match(new RegExp(`^stayhub_events_group_events_aged_out\\{group="${g}"\\} (\\d)$`, 'm'))?.[1];
      };
      expect(await agedOut()).toBe('1');
      // The server hands the group the first event it still has: past the gap, the figures look
      // normal again, and the metric still says what happened.
      await waitFor(
        async () => {
          const c = await nats.jsm.consumers.info(stream, g);
          return (
            c.num_pending === 0 &&
            c.num_ack_pending === 0 &&
            c.delivered.stream_seq >= (await nats.jsm.streams.info(stream)).state.first_seq
          );
        },
        30_000,
        'the group past the gap',
      );
      expect(await agedOut()).toBe('1');
    } finally {
      expect(await child.stop()).toBe(0);
    }
    // Four bookings never reached this ledger: it says less than the bookings table, and said so.
    expect((await line(g, host))!.bookings).toBe(4);
  }, 90_000);
});

describe('the earnings ledger counts each booking once, whichever message brings it', () => {
  const apply = (g: string, topic: string, body: unknown) => applyOnce(t.db.db, g, consumedEvent(topic, body), applyEarningsEvent(g), log);

  async function booked(host: Session, cancel: boolean) {
    const [b] = await book(host, 1, cancel ? [0] : []);
    const { rows } = await t.db.db.execute<{ property: string }>(sql`
      select p.public_id as property from bookings b join properties p on p.id = b.property_id where b.public_id = ${b!.id}`);
    return { bookingId: b!.id, propertyId: rows[0]!.property, total: b!.total, currency: 'EUR' };
  }

  it('a cancellation before its creation, and copies of either under new message ids', async () => {
    const g = group('order');
    const host = await signUp(t.app, 'host');
    const body = await booked(host, true);
    await apply(g, 'booking.cancelled', { ...body, cancelledBy: 'guest' });
    expect(await line(g, host)).toEqual({ confirmed: body.total, cancelled: body.total, net: 0, bookings: 1, cancellations: 1 });
    await apply(g, 'booking.created', body);
    await apply(g, 'booking.created', body);
    await apply(g, 'booking.cancelled', { ...body, cancelledBy: 'guest' });
    expect(await line(g, host)).toEqual({ confirmed: body.total, cancelled: body.total, net: 0, bookings: 1, cancellations: 1 });
  });

  it('after a rebuild from the bookings table, only what the rebuild did not see', async () => {
    const g = group('after-rebuild');
    const host = await signUp(t.app, 'host');
    const seen = await booked(host, false);
    const summary = await rebuildLedger(t.db.db, g);
    expect(summary.bookings).toBeGreaterThan(0);
    expect(await ledgerDifferences(t.db.db, g)).toEqual([]);
    const unseen = await booked(host, false);
    await apply(g, 'booking.created', seen); // reflected by the rebuild
    await apply(g, 'booking.created', unseen); // made after it
    expect(await ledgerDifferences(t.db.db, g)).toEqual([]);
    expect((await line(g, host))!.bookings).toBe(2);
  });
});

describe('migration 0005 on ledgers kept before it', () => {
  const tdb = useTestDatabase('earnings_upgrade');

  it('rebuilds them from the bookings table, so a later cancellation or a pending creation counts nothing twice', async () => {
    const host = await createUser(tdb.db, { email: uniqueEmail('host'), password: 'host password 1', name: 'Hana Host', role: 'host' });
    const guest = await createUser(tdb.db, { email: uniqueEmail('guest'), password: 'guest password 1', name: 'Gus', role: 'guest' });
    const propertyId = randomUUID();
    await tdb.db.execute(sql`
      insert into properties (public_id, host_id, title, city, country, currency, nightly_price, max_guests)
      values (${propertyId}, ${host.id}, 'Old flat', 'Porto', 'PT', 'EUR', 1000, 2)`);
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    for (const [i, id] of ids.entries()) {
      await tdb.db.execute(sql`
        insert into bookings (public_id, property_id, guest_id, check_in, check_out, guests, status, currency, nights, nightly_price, subtotal, cleaning_fee, service_fee, total)
        select ${id}, p.id, ${guest.id}, current_date + ${10 + i * 5}::int, current_date + ${11 + i * 5}::int, 1,
               ${i === 1 ? 'cancelled' : 'confirmed'}, 'EUR', 1, 1000, 1000, 0, ${i}, ${1000 + i}
          from properties p where p.public_id = ${propertyId}`);
    }
    // The database as the release before left it: no list of counted bookings, and two ledgers
    // kept by increments. `earnings` has counted bookings 0 and 1 and 1's cancellation (booking 2's
    // event still on its way); `short` got booking 1's cancellation without its creation.
    await tdb.db.execute(sql`drop table earnings_bookings`);
    await tdb.db.execute(sql`
      insert into host_earnings (consumer_group, host_id, currency, confirmed_total, cancelled_total, bookings, cancellations)
      values ('earnings', ${host.id}, 'EUR', 2001, 1001, 2, 1), ('short', ${host.id}, 'EUR', 0, 1001, 0, 1)`);

    const migration = readFileSync(path.join(ROOT, 'migrations/0005_earnings_bookings.sql'), 'utf8');
    for (const statement of migration.split('--> statement-breakpoint')) await tdb.db.execute(sql.raw(statement));

    for (const g of ['earnings', 'short']) expect(await ledgerDifferences(tdb.db, g)).toEqual([]);
    const { rows } = await tdb.db.execute<{ consumer_group: string; n: number; cancelled: number }>(sql`
      select consumer_group, count(*)::int as n, (count(*) filter (where cancelled))::int as cancelled
        from earnings_bookings where counted_from = 'rebuild' group by 1 order by 1`);
    expect(rows).toEqual([
      { consumer_group: 'earnings', n: 3, cancelled: 1 },
      { consumer_group: 'short', n: 3, cancelled: 1 },
    ]);

    // Then the events: booking 2's creation (counted by the migration), booking 0's cancellation.
    await tdb.db.execute(sql`update bookings set status = 'cancelled', cancelled_at = now() where public_id = ${ids[0]!}`);
    const body = (i: number) => ({ bookingId: ids[i]!, propertyId, total: 1000 + i, currency: 'EUR' });
    const deliver = (topic: string, b: unknown) =>
      applyOnce(tdb.db, 'earnings', consumedEvent(topic, b), applyEarningsEvent('earnings'), log);
    await deliver('booking.created', body(2));
    await deliver('booking.cancelled', { ...body(0), cancelledBy: 'guest' });
    expect(await ledgerDifferences(tdb.db, 'earnings')).toEqual([]);
    const { rows: line } = await tdb.db.execute(sql`
      select confirmed_total::int, cancelled_total::int, bookings, cancellations from host_earnings where consumer_group = 'earnings'`);
    expect(line).toEqual([{ confirmed_total: 3003, cancelled_total: 2001, bookings: 3, cancellations: 2 }]);
  });
});
