import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startEventsChaos } from '../../../scripts/chaos/events/events-chaos.ts';
import { ledgerDifferences } from '../../../src/events/earnings/ledger.ts';
import { EVENT_CHECKS } from '../../../scripts/chaos/checks.ts';
import { daysFromNow, listProperty, signUp, useTestApp } from '../../helpers/app.ts';
import { skipWithoutNats } from '../../helpers/nats.ts';
import { entryArgs } from '../../../scripts/lib/processes.ts';
import { waitFor } from '../../helpers/wait.ts';

/*
 * A short events chaos run (scripts/chaos/events/) on its three-node cluster: bookings while the
 * worker relays and the earnings consumer is SIGKILLed, the whole cluster stopped, the stream's
 * leader SIGKILLed, the group's leader back with its store wiped, forged events published and the
 * stream deleted under both; then every invariant holds. And the checker itself catches what it is there
 * to catch.
 *
 * Slow (about 40 s alone) because the faults are real: a three-node cluster elects leaders and
 * catches up a wiped node in its own time, and the checker waits for it.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const skip = skipWithoutNats();
const t = useTestApp();

const outboxDone = async () => {
  const { rows } = await t.db.db.execute<{ n: number }>(sql`select count(*)::int as n from outbox where status <> 'DONE'`);
  return rows[0]!.n === 0;
};

describe.skipIf(skip)('events chaos', () => {
  it('keeps every booking event in the stream once and the ledger right through consumer kills, a NATS outage, node losses, forgeries and a deleted stream', async () => {
    const events = await startEventsChaos({ databaseUrl: t.db.url, root: ROOT });
    const { DATABASE_URL: _a, NATS_URL: _b, ...inherited } = process.env;
    const worker = spawn(process.execPath, entryArgs('src/commands/drain-outbox.ts'), {
      cwd: ROOT,
      env: {
        ...inherited,
        ...events.env,
        DATABASE_URL: t.db.url,
        LOG_LEVEL: 'warn',
        POLL_INTERVAL_MS: '100',
        BACKOFF_BASE_SECONDS: '0.2',
        BACKOFF_MAX_SECONDS: '1',
        MAX_ATTEMPTS: '100',
        EVENTS_PUBLISH_TIMEOUT_MS: '500',
        MAIL_DIR: mkdtempSync(path.join(os.tmpdir(), 'stayhub-mail-')),
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    try {
      await events.startConsumer();
      const host = await signUp(t.app, 'host');
      const guest = await signUp(t.app, 'guest');
      const p = await listProperty(t.app, host);
      let bookingEvents = 0; // booking.created and booking.cancelled committed
      const outage = { startedAt: 0, endedAt: 0 };
      // The i-th two-night stay at the property, answered 201.
      const book = async (i: number) => {
        const res = await t.app.inject({
          method: 'POST',
          url: '/bookings',
          headers: guest.auth,
          payload: { propertyId: p.id, checkIn: daysFromNow(5 + 3 * i), checkOut: daysFromNow(7 + 3 * i), guests: 1 },
        });
        expect(res.statusCode).toBe(201);
        return res;
      };
      for (let i = 0; i < 30; i++) {
        const res = await book(i);
        bookingEvents++;
        if (i % 4 === 0) {
          const cancel = await t.app.inject({ method: 'POST', url: `/bookings/${res.json().id}/cancel`, headers: guest.auth });
          expect(cancel.statusCode).toBe(200);
          bookingEvents++;
        }
        // The stream's leader lost mid-run, and the group's leader back with its store wiped.
        if (i === 11) {
          const killed = await events.killNatsNode({ leader: true, index: 0 }, 500);
          expect(killed, 'node kill').toMatchObject({ wasLeader: true, seen: { signal: 'SIGKILL' }, caughtUpAfterMs: expect.any(Number) });
        }
        if (i === 24) {
          const wiped = await events.wipeNatsNode({ leader: true, index: 0 });
          expect(wiped, 'node wipe').toMatchObject({ wasLeader: true, wiped: true, caughtUpAfterMs: expect.any(Number) });
        }
        if (i === 8 || i === 20)
          expect(await events.killConsumer(500, 30_000), `kill ${i}`).toMatchObject({ seen: { signal: 'SIGKILL' }, consuming: true });
        if (i === 14) {
          outage.startedAt = Date.now();
          expect(await events.natsOutage(1000)).toMatchObject({
            stopped: { pid: expect.any(Number) },
            refusedWhileDown: true,
            restartedPid: expect.any(Number),
          });
          outage.endedAt = Date.now();
        }
      }
      // Two forgeries, each refused by the ledger, then the stream deleted under the relay and the
      // consumer, and bookings after it: the two recreate it, the group carries on.
      // Refused within 45 s: what is checked is the refusal; a loaded machine's consumer, back
      // from a wiped leader, may take longer than the chaos run's 15 s to reach it.
      const wrongAmount = await events.forgeEvent('wrong-amount', 0.5, 45_000);
      expect(wrongAmount, events.consumerLogTail()).toMatchObject({
        forged: { kind: 'wrong-amount', seq: expect.any(Number) },
        lastError: expect.stringMatching(/refused/),
      });
      const unknown = await events.forgeEvent('unknown-booking', 0.1, 45_000);
      expect(unknown, events.consumerLogTail()).toMatchObject({
        forged: { kind: 'unknown-booking' },
        lastError: expect.stringMatching(/no such booking/),
      });
      // Deleted once the group has applied everything: a deletion while it is behind loses money
      // (what the stream held and the group had not applied is gone), which the run reports.
      // And once every message is DONE: a publish stored whose PubAck came too late (a loaded
      // machine, a leader catching up) is published again, and after the deletion that copy
      // would land in the new stream beside the three bookings made after it.
      // Within a minute: a guard against a hang, as the forgeries' 45 s. On a loaded machine a
      // consumer back from a wiped leader took over 30 s to apply the last events.
      await waitFor(async () => (await ledgerDifferences(t.db.db, 'earnings')).length === 0, 60_000, 'the consumer to catch up').catch(
        (e: unknown) => {
          throw new Error(`${String(e)}\n--- the consumer's log ---\n${events.consumerLogTail()}`);
        },
      );
      await waitFor(outboxDone, 60_000, 'the relay to publish every message');
      const deletion = await events.deleteStream();
      expect(deletion).toMatchObject({ deleted: true, groupBack: true, createdAfter: expect.any(String) });
      expect(deletion.createdAfter).not.toBe(deletion.createdBefore);
      for (let i = 30; i < 33; i++) {
        await book(i);
        bookingEvents++;
      }
      // Every outbox message DONE (the relay published them all), then the consumer to the end.
      await waitFor(outboxDone, 30_000, 'the outbox drained');
      await events.finish();
      const results = await events.check();
      expect(results).toEqual([
        { name: EVENT_CHECKS.exactlyOnce, ok: true, violations: [], violationCount: 0 },
        { name: EVENT_CHECKS.ledger, ok: true, violations: [], violationCount: 0 },
        { name: EVENT_CHECKS.deadLetters, ok: true, violations: [], violationCount: 0 },
        { name: EVENT_CHECKS.forgedRefused, ok: true, violations: [], violationCount: 0 },
      ]);
      expect(events.consumerKills).toBe(2);
      // The events before the deletion went with the stream; the three after it are in the new one.
      expect(events.figures).toMatchObject({
        bookingEventsInOutbox: bookingEvents,
        bookingMessagesInStream: 3,
        goneWithDeletedStream: bookingEvents - 3,
        deadLetters: 2,
        forged: 2,
        forgedRefused: 2,
        forgedApplied: 0,
        forgedGone: 0,
        streamDeletions: 1,
        uncountedBookings: 0,
      });
      // The one exit allowed, as in the chaos verdict: a consumer (re)starting while nats-server is
      // down refuses to start, and its supervisor starts it again.
      const refusedDuringOutage = (e: { code: number | null; at?: number; lastLines: string[] }) =>
        e.code === 1 &&
        e.lastLines.some((l) => l.includes('cannot reach NATS')) &&
        e.at !== undefined &&
        e.at >= outage.startedAt &&
        e.at <= outage.endedAt + 5_000;
      expect(events.consumer.unplannedExits.filter((e) => !refusedDuringOutage(e))).toEqual([]);
      expect(events.nats.unplannedExits).toEqual([]);

      // A forgery never refused that has left the stream unread (here with the deleted stream) was
      // never offered to the group: counted apart, not a violation.
      await t.db.db.execute(sql`delete from consumer_dead_letters where message_id = ${wrongAmount.forged!.messageId}`);
      expect((await events.check())[3]).toMatchObject({ name: EVENT_CHECKS.forgedRefused, ok: true });
      expect(events.figures).toMatchObject({ forged: 2, forgedRefused: 1, forgedGone: 1, forgedApplied: 0 });

      // The checker catches a stray event and a wrong ledger.
      const nc = await connect({ servers: events.nats.servers });
      await jetstream(nc).publish('chaos.booking.created', '{}', { msgID: 'not-from-the-outbox' });
      await nc.close();
      await t.db.db.execute(sql`update host_earnings set confirmed_total = confirmed_total + 1`);
      await t.db.db.execute(
        sql`insert into consumer_dead_letters (consumer_group, message_id, stream_seq, subject, headers, data, deliveries, last_error)
            values ('earnings', 'dead-one', 1, 'chaos.booking.created', '{}'::jsonb, '{}'::jsonb, 5, 'PermanentError: earnings: body does not match')`,
      );
      // A forgery the ledger applied: in the inbox, its dead letter gone.
      await t.db.db.execute(sql`delete from consumer_dead_letters where message_id = ${unknown.forged!.messageId}`);
      await t.db.db.execute(
        sql`insert into processed_messages (consumer_group, message_id, stream_seq) values ('earnings', ${unknown.forged!.messageId}, 1)`,
      );
      const broken = await events.check();
      expect(broken.map((r) => [r.name, r.ok, r.violationCount])).toEqual([
        [EVENT_CHECKS.exactlyOnce, false, 1],
        [EVENT_CHECKS.ledger, false, 1],
        [EVENT_CHECKS.deadLetters, false, 1],
        [EVENT_CHECKS.forgedRefused, false, 2],
      ]);
      expect(broken[3]!.violations).toEqual([
        expect.stringMatching(/unknown-booking.* was applied: it is in the group's inbox$/),
        expect.stringMatching(/unknown-booking.* is not a consumer dead letter$/),
      ]);
      expect(broken[0]!.violations[0]).toMatch(/not-from-the-outbox is in the stream 1 time\(s\) but in no committed outbox row/);
      expect(broken[2]!.violations[0]).toMatch(/^dead-one .* dead after 5 deliveries: PermanentError/);
    } finally {
      const exited = new Promise((r) => worker.once('exit', r));
      worker.kill('SIGTERM');
      await exited;
      await events.stop();
    }
  }, 180_000);
});
