import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { AckPolicy, jetstream } from '@nats-io/jetstream';
import { auditLedger, startLedgerAudit } from '../../../src/events/earnings/audit.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { earningsMain } from '../../../src/commands/consume-earnings.ts';
import type { Logger } from '../../../src/logger.ts';
import { main as drainOutbox } from '../../../src/commands/drain-outbox.ts';
import { bookStays, signUp, useTestApp, type Session } from '../../helpers/app.ts';
import { eventsEnv, freshStream, skipWithoutNats, useNats } from '../../helpers/nats.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * The ledger's audit against the outbox (src/events/earnings/audit.ts). A stream that went back a
 * few sequences (a replica that was behind became its leader) stores the next events at numbers
 * the group has acknowledged, and the group never reads them. Here the group acknowledges events
 * without applying them, which leaves it in the same place: past events its ledger lacks.
 *
 * Slow (about 20 s alone): bookings go through a real nats-server and a consumer before there is
 * anything to audit.
 */

const skip = skipWithoutNats();
const t = useTestApp();
const nats = useNats(skip, { client: true });
let stream = 'AUD';
beforeEach(async () => {
  stream = freshStream('AUD');
  await t.db.db.execute(sql`delete from outbox where status = 'DONE'`);
});

const env = (extra: Record<string, string> = {}) => eventsEnv(t.db.url, nats.url, stream, { EVENTS_ACK_WAIT_SECONDS: '1', ...extra });

async function consume(group: string, extra: Record<string, string> = {}) {
  const lines: string[] = [];
  const code = await earningsMain({
    argv: ['--group', group, '--until-empty'],
    env: env(extra),
    out: (l) => lines.push(l),
    err: (l) => lines.push(l),
    exitOnForcedStop: false,
  });
  return { code, said: lines.join('\n') };
}

async function relay() {
  expect(await drainOutbox({ argv: ['--until-empty'], env: env(), out: () => {}, err: () => {} })).toBe(0);
}

/** `n` bookings on a new property of `host`, the first `cancelled` of them cancelled. */
async function book(host: Session, n: number, cancelled = 0) {
  const { guest, bookings } = await bookStays(t.app, host, n);
  for (const b of bookings.slice(0, cancelled)) {
    const res = await t.app.inject({ method: 'POST', url: `/bookings/${b.id}/cancel`, headers: guest.auth });
    expect(res.statusCode, res.body).toBe(200);
  }
  return bookings;
}

/** Acknowledges every event the group has not read, applying none: the group is past them. */
async function skipPending(group: string): Promise<number> {
  const consumer = await jetstream(nats.nc).consumers.get(stream, group);
  let skipped = 0;
  for (;;) {
    const batch = await consumer.fetch({ max_messages: 100, expires: 1000 });
    let n = 0;
    for await (const m of batch) {
      await m.ackAck();
      n++;
    }
    if (n === 0) return skipped;
    skipped += n;
  }
}

/** The group's ledger: bookings counted and cancellations, over every host. */
async function counted(group: string) {
  const { rows } = await t.db.db.execute<{ bookings: number; cancellations: number }>(sql`
    select coalesce(sum(bookings), 0)::int as bookings, coalesce(sum(cancellations), 0)::int as cancellations
      from host_earnings where consumer_group = ${group}`);
  return rows[0]!;
}

/** A new group that read a new host's first `n` bookings' events. */
async function groupThatRead(n: number) {
  const group = `audit-${randomUUID().slice(0, 6)}`;
  const host = await signUp(t.app, 'host');
  await book(host, n);
  await relay();
  expect((await consume(group)).code).toBe(0);
  return { group, host };
}

describe.skipIf(skip)('the earnings ledger audit', () => {
  it('counts, once, the booking events the group went past without applying; leaves those it has not reached', async () => {
    const { group, host } = await groupThatRead(2);
    expect(await counted(group)).toEqual({ bookings: 2, cancellations: 0 });

    // Two bookings made, one of them cancelled: three events the group goes past.
    await book(host, 2, 1);
    await relay();
    expect(await skipPending(group)).toBe(3);
    expect(await ledgerDifferences(t.db.db, group)).not.toEqual([]);

    // Then a booking the group does read: its ack floor moves past the skipped events by more
    // than the audit's margin (2 s between PostgreSQL's clock and NATS's).
    await new Promise((r) => setTimeout(r, 2_500));
    await book(host, 1);
    await relay();
    const run = await consume(group);
    expect(run.code, run.said).toBe(0);
    // --until-empty audits once before it exits: the skipped events are counted from the bookings
    // table, the two bookings as gaps (their events never applied), the new one from its event.
    const { rows } = await t.db.db.execute<{ counted_from: string; n: number }>(sql`
      select counted_from, count(*)::int as n from earnings_bookings
       where consumer_group = ${group} group by counted_from order by counted_from`);
    expect(rows).toEqual([
      { counted_from: 'event', n: 3 },
      { counted_from: 'gap', n: 2 },
    ]);
    expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
    expect(await counted(group)).toEqual({ bookings: 5, cancellations: 1 });

    // Audited again: nothing more. A booking relayed that the group has not reached yet is late,
    // not missed: left to the group.
    const opts = { db: t.db.db, jsm: nats.jsm, stream, group, lookbackMs: 600_000, marginMs: 0 };
    expect(await auditLedger(opts)).toMatchObject({ creations: 0, cancellations: 0, checkedBefore: expect.any(Date) });
    await book(host, 1);
    await relay();
    expect(await auditLedger(opts)).toMatchObject({ creations: 0, cancellations: 0 });
    expect(await counted(group)).toEqual({ bookings: 5, cancellations: 1 });
    // And when the group reads it, it counts once.
    expect((await consume(group)).code).toBe(0);
    expect(await counted(group)).toEqual({ bookings: 6, cancellations: 1 });
    expect(await ledgerDifferences(t.db.db, group)).toEqual([]);
  }, 90_000);

  it("audits up to the stream's last event when the floor's event is gone and the group is past the end", async () => {
    const { group, host } = await groupThatRead(1);
    // Two bookings the group goes past without applying them, then a third, well after them.
    await book(host, 2);
    await relay();
    expect(await skipPending(group)).toBe(2);
    await new Promise((r) => setTimeout(r, 2_500));
    await book(host, 1);
    await relay();
    expect(await skipPending(group)).toBe(1);
    // The floor's event leaves the stream, which keeps its last sequence: the group is past its end,
    // as after a stream that went back below the group's position.
    const floor = (await nats.jsm.consumers.info(stream, group)).ack_floor.stream_seq;
    expect(await nats.jsm.streams.deleteMessage(stream, floor)).toBe(true);
    expect((await nats.jsm.streams.info(stream)).state.last_seq).toBe(floor);
    const result = await auditLedger({ db: t.db.db, jsm: nats.jsm, stream, group, lookbackMs: 600_000 });
    expect(result.checkedBefore).not.toBeNull();
    // The two bookings before the margin are counted from the bookings table; the third, inside it, is left.
    expect(result).toMatchObject({ creations: 2, cancellations: 0 });
  }, 60_000);

  it('audits on its timer, says what it counted, and stops', async () => {
    const { group, host } = await groupThatRead(1);
    await book(host, 1);
    await relay();
    expect(await skipPending(group)).toBe(1);
    await book(host, 1);
    await relay();
    // No audit of its own (0 = off): the one below finds the skipped event.
    expect((await consume(group, { EVENTS_EARNINGS_AUDIT_INTERVAL_SECONDS: '0' })).code).toBe(0);
    expect(await counted(group)).toEqual({ bookings: 2, cancellations: 0 });

    const warned: unknown[] = [];
    const log = { warn: (o: unknown) => warned.push(o) } as unknown as Logger;
    const countedNow: number[] = [];
    const audit = startLedgerAudit({
      ...{ db: t.db.db, jsm: nats.jsm, stream, group, lookbackMs: 600_000, marginMs: 0 },
      intervalMs: 100,
      log,
      onCounted: (n) => countedNow.push(n),
    });
    try {
      await waitFor(async () => countedNow.length > 0, 5_000, `an audit on the timer (logged: ${JSON.stringify(warned)})`);
    } finally {
      await audit.stop();
    }
    expect(countedNow).toEqual([1]);
    expect(warned).toEqual([expect.objectContaining({ creations: 1, cancellations: 0, group })]);
    expect(await counted(group)).toEqual({ bookings: 3, cancellations: 0 });
  });

  it("reads the outbox up to the margin before the ack floor's event, never past it", async () => {
    const { group, host } = await groupThatRead(1);
    // Relayed after the group's floor, not read yet: within a minute after the floor's event.
    await book(host, 1);
    await relay();
    const floor = (await nats.jsm.consumers.info(stream, group)).ack_floor.stream_seq;
    const atFloor = await nats.jsm.streams.getMessage(stream, { seq: floor });
    const result = await auditLedger({ db: t.db.db, jsm: nats.jsm, stream, group, lookbackMs: 600_000, marginMs: 60_000 });
    // The margin is taken off the floor's time: the booking the group has not reached is late, not missed.
    expect(result).toEqual({ checkedBefore: new Date(atFloor!.time.getTime() - 60_000), creations: 0, cancellations: 0 });
    expect(await counted(group)).toEqual({ bookings: 1, cancellations: 0 });
  });

  it('counts a missed cancellation of a booking the ledger already counts: the cancellation alone', async () => {
    const group = `audit-${randomUUID().slice(0, 6)}`;
    const host = await signUp(t.app, 'host');
    const { guest, bookings } = await bookStays(t.app, host, 1);
    await relay();
    expect((await consume(group)).code).toBe(0);
    expect(await counted(group)).toEqual({ bookings: 1, cancellations: 0 });

    // Its cancellation, which the group goes past without applying.
    const res = await t.app.inject({ method: 'POST', url: `/bookings/${bookings[0]!.id}/cancel`, headers: guest.auth });
    expect(res.statusCode, res.body).toBe(200);
    await relay();
    expect(await skipPending(group)).toBe(1);
    // Then a booking the group reads, so its floor is past the cancellation (no audit of its own).
    await book(host, 1);
    await relay();
    expect((await consume(group, { EVENTS_EARNINGS_AUDIT_INTERVAL_SECONDS: '0' })).code).toBe(0);

    const opts = { db: t.db.db, jsm: nats.jsm, stream, group, lookbackMs: 600_000, marginMs: 0 };
    expect(await auditLedger(opts)).toMatchObject({ creations: 0, cancellations: 1 });
    expect(await auditLedger(opts)).toMatchObject({ creations: 0, cancellations: 0 });
    const { rows } = await t.db.db.execute<{ confirmed: string; cancelled: string; bookings: number; cancellations: number }>(sql`
      select confirmed_total::text as confirmed, cancelled_total::text as cancelled, bookings, cancellations
        from host_earnings where consumer_group = ${group}`);
    const { rows: second } = await t.db.db.execute<{ total: number }>(sql`
      select b.total from bookings b join earnings_bookings e on e.booking_id = b.id
       where e.consumer_group = ${group} and b.public_id <> ${bookings[0]!.id}`);
    expect(rows).toEqual([
      {
        confirmed: String(bookings[0]!.total + second[0]!.total),
        cancelled: String(bookings[0]!.total),
        bookings: 2,
        cancellations: 1,
      },
    ]);
  });

  it('with no event acknowledged, audits nothing', async () => {
    const group = `audit-${randomUUID().slice(0, 6)}`;
    const host = await signUp(t.app, 'host');
    await book(host, 1);
    await relay();
    await nats.jsm.consumers.add(stream, {
      durable_name: group,
      ack_policy: AckPolicy.Explicit,
      filter_subject: `${stream.toLowerCase()}.booking.>`,
    });
    expect(await auditLedger({ db: t.db.db, jsm: nats.jsm, stream, group, lookbackMs: 600_000, marginMs: 0 })).toEqual({
      checkedBefore: null,
      creations: 0,
      cancellations: 0,
    });
  });
});
