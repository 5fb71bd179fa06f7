import { setTimeout as sleep } from 'node:timers/promises';
import { randomUUID } from 'node:crypto';
import { jetstream } from '@nats-io/jetstream';
import { connect, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { jetStreamElecting } from '../../../src/events/connection.ts';
import { HEADERS, publicBody, SCHEMA_VERSIONS, subjectFor } from '../../../src/events/subjects.ts';
import { latestOfTopic } from '../../../src/outbox/index.ts';
import type { EventsStage, ForgedEvent, ForgedEventObserved, ForgeryKind } from './observed.ts';
import { poll } from '../poll.ts';

type BookingBody = { bookingId: string; propertyId: string; total: number; currency: string };

/** The latest 50 booking.created events, asked again (bounded) while there are none or PostgreSQL restarts. */
async function latestBookings(s: EventsStage): Promise<{ key: string; payload: Record<string, unknown> }[]> {
  let latest: { key: string; payload: Record<string, unknown> }[] = [];
  for (let i = 0; i < 100 && latest.length === 0; i++) {
    try {
      latest = await latestOfTopic(s.database().pool, 'booking.created', 50);
      if (latest.length === 0) await sleep(100);
    } catch {
      await sleep(100); // PostgreSQL restarting
    }
  }
  return latest;
}

/**
 * Publishes `lie` on the stream's subject with the relay's headers; its PubAck's sequence. The
 * same message id on every try: a try whose PubAck was lost is not stored twice. Tried again (up
 * to 15 s) while the cluster has no leader for the stream.
 */
async function publishForged(s: EventsStage, nc: NatsConnection, lie: BookingBody, messageId: string): Promise<number> {
  const h = natsHeaders();
  h.set(HEADERS.topic, 'booking.created');
  h.set(HEADERS.key, lie.bookingId);
  h.set(HEADERS.outboxId, messageId);
  h.set(HEADERS.occurredAt, new Date().toISOString());
  h.set(HEADERS.schemaVersion, String(SCHEMA_VERSIONS['booking.created']));
  const publish = () =>
    jetstream(nc).publish(subjectFor(s.subjectPrefix, 'booking.created'), JSON.stringify(lie), {
      msgID: messageId,
      headers: h,
      timeout: 3_000,
    });
  const until = Date.now() + 15_000;
  for (;;) {
    try {
      return (await publish()).seq;
    } catch (err) {
      // A timeout, or "no responders" (nobody listens on the stream's subjects between leaders).
      const cause = (err as { cause?: Error }).cause;
      const electing = jetStreamElecting(err) || /no responders/i.test(`${(err as Error).message} ${cause?.message ?? ''}`);
      if (!electing || Date.now() > until) throw err;
      await sleep(250);
    }
  }
}

/** Waits (up to `withinMs`) for the group's dead letter of `messageId`. */
async function deadLettered(s: EventsStage, messageId: string, publishedAt: number, withinMs: number) {
  const found = await poll(
    async () => {
      const { rows } = await s
        .database()
        .db.execute<{ last_error: string }>(
          sql`select last_error from consumer_dead_letters where consumer_group = ${s.group} and message_id = ${messageId}`,
        );
      return rows[0] && { deadLetteredAfterMs: Date.now() - publishedAt, lastError: rows[0].last_error };
    },
    publishedAt + withinMs,
    100,
  );
  return found ?? { deadLetteredAfterMs: null, lastError: null };
}

/**
 * Publishes a booking.created the relay never wrote, on the stream's subject and with the
 * relay's headers: `unknown-booking` names a real property (so a real host) and a booking id
 * that does not exist; `wrong-amount` is a real booking's event with another total. `pick`
 * (in [0, 1), from the seed) chooses the booking among the latest 50. Then waits (up to
 * `refusedWithinMs`) for the group's dead letter, so a stream deletion right after cannot take
 * the forgery away before the consumer has judged it.
 */
export async function forgeEvent(s: EventsStage, kind: ForgeryKind, pick: number, refusedWithinMs = 15_000): Promise<ForgedEventObserved> {
  const latest = await latestBookings(s);
  const real = latest[Math.floor(pick * latest.length)];
  if (!real) return { forged: null, failed: 'no booking to name', deadLetteredAfterMs: null, lastError: null };
  const body = publicBody(real.payload) as BookingBody;
  const messageId = randomUUID();
  const lie =
    kind === 'unknown-booking'
      ? { ...body, bookingId: randomUUID(), idempotencyKey: `forged:${messageId}` }
      : { ...body, total: body.total + 1 + Math.floor(pick * 50_000) };
  let seq: number;
  const nc = await connect({ servers: s.nats.servers, timeout: 3_000 });
  try {
    seq = await publishForged(s, nc, lie, messageId);
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
  s.forged.push(f);
  return { forged: f, ...(await deadLettered(s, messageId, publishedAt, refusedWithinMs)) };
}
