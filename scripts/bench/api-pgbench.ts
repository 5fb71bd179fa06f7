import { STAY_NIGHTS, type ApiFixture } from './api.ts';
import { runPgbench, type PgbenchMode, type PgbenchRun } from './lib/pgbench.ts';
import type { BenchParams } from './params.ts';
import { withClient } from '../lib/postgres.ts';
import { priorityOf } from '../../src/messages/topics.ts';

/*
 * pgbench running the booking transaction the API runs, on the API's own database and properties:
 * the write path's floor (the api section) and what the outbox row costs a booking (outbox cost).
 */

/** booking.created's priority, as enqueue writes it (TOPIC_PRIORITY). */
const BOOKING_PRIORITY = priorityOf('booking.created');

/** The namespace of the service's per-property advisory lock (BOOKING_LOCK_NAMESPACE, 0x5b00c). */
const BOOKING_LOCK_NAMESPACE = 0x5b00c;

/**
 * The service's booking transaction as plain SQL, for pgbench, statement for statement what
 * src/bookings/booking.service.ts sends: read the property and its host while taking the
 * per-property advisory lock, insert the booking (the exclusion constraint checks the dates) and
 * its outbox row with a payload of the same shape (JSON text the server parses, as the service
 * sends it) in one statement, COMMIT, then pg_notify (the
 * worker's wake-up goes after the commit). The row is grouped by the host and owned by the guest,
 * with the topic's priority and its turn from outbox_turn, as enqueue writes it, from the two
 * public ids the first statement read (the service has them before it writes). Variant 'none'
 * drops the outbox row and the notify.
 * The diagnostic variants: 'in-transaction' (the notify inside the transaction, as enqueue did at
 * first), 'no-notify' (the row alone), 'given-turn' (the row alone with a constant for its
 * turn: the same index entries without outbox_turn's three probes). 'wal-message' is the other way
 * the product writes (OUTBOX_WRITES=wal): no row, the message in a transactional logical-decoding
 * message, as src/outbox/wal-messages.ts writes it, and no wake-up: the worker that makes its row
 * sends that (src/outbox/enqueue.ts).
 * Each client numbers its own stays (k), interleaved by client_id, so no two ever overlap.
 *
 * `fanOutTo`: the outbox written one row per subscription instead of one per message, as a queue
 * that fans out at enqueue would write it (pg-boss: a job per subscribed queue; the fanout
 * section): a row per handler named, each with the same payload, the handler in `lane`, the
 * event's id in `origin_id` (what the relay's Nats-Msg-Id needs when rows are many) and the key
 * `<handler>@<booking>`, as a lane row is keyed, so each handler keeps its own order per booking.
 */
export type OutboxVariant = 'notify-after-commit' | 'in-transaction' | 'no-notify' | 'given-turn' | 'wal-message' | 'none';

export function bookingScript(variant: OutboxVariant, fanOutTo: readonly string[] = []): string {
  const lines = [
    '\\set k :k + 1',
    '\\set slot :k * :clients + :client_id',
    '\\set pid :pmin + (:slot % :nprops)',
    '\\set gid :gmin + (:slot % :nguests)',
    `\\set day :base + ${STAY_NIGHTS} * (:slot / :nprops)`,
    'BEGIN;',
    // \gset keeps the two public ids the row is grouped and owned by (r_host_public_id,
    // r_guest_public_id), as the service has them: the host's read with the property, the guest's
    // with the signed-in user (here a probe by primary key, in every variant).
    'SELECT p.*, h.public_id AS host_public_id, h.email AS host_email, h.name AS host_name, ' +
      '(SELECT u.public_id FROM users u WHERE u.id = :gid) AS guest_public_id, ' +
      `pg_advisory_xact_lock((${BOOKING_LOCK_NAMESPACE}::bigint << 32) # p.id)::text FROM properties p JOIN users h ON h.id = p.host_id WHERE p.id = :pid`,
    '\\gset r_',
  ];
  const insertBooking =
    'INSERT INTO bookings (property_id, guest_id, check_in, check_out, guests, currency, nights, nightly_price, subtotal, cleaning_fee, service_fee, total) ' +
    `VALUES (:pid, :gid, current_date + :day::int, current_date + :day::int + ${STAY_NIGHTS}, 2, 'EUR', ${STAY_NIGHTS}, 10000, 20000, 2500, 2700, 25200) ON CONFLICT DO NOTHING RETURNING *`;
  const who = [':r_host_public_id::text', ':r_guest_public_id::text'];
  // The payload as the service sends it: JSON text made by the API (one parameter), parsed by the
  // server, `::jsonb` into the row or `::json` into the WAL message. Made here by format(), per
  // transaction, with the booking's own ids and dates in it.
  const payloadText =
    `format('{"bookingId":"%s","propertyId":"%s","propertyTitle":"Bench flat","guestEmail":"bench-guest@example.test",` +
    `"guestName":"Bench guest","hostEmail":"bench-host@example.test","hostName":"Bench host","checkIn":"%s","checkOut":"%s",` +
    `"guests":2,"nights":2,"total":25200,"currency":"EUR","idempotencyKey":"booking-created:%s"}', ` +
    'b.public_id, gen_random_uuid(), current_date + :day::int, current_date + :day::int + 2, b.public_id)';
  const payload = `${payloadText}::jsonb`;
  if (variant === 'none') {
    lines.push(`${insertBooking};`);
  } else if (variant === 'wal-message') {
    // OUTBOX_WRITES=wal, as the service writes it (src/outbox/wal-messages.ts walMessageSql): the
    // message in the WAL only, gone with a rollback, read back in commit order through a
    // replication slot by the worker (ADR 0056), which sends the wake-up once the row is made.
    const message =
      `json_build_object('topic', 'booking.created', 'payload', ${payloadText}::json, 'key', b.public_id, 'priority', ${BOOKING_PRIORITY}, ` +
      `'group', ${who[0]}, 'owner', ${who[1]}, 'at', now())`;
    lines.push(
      `WITH b AS (${insertBooking}) SELECT b.*, set_config('synchronous_commit', 'on', true) IS NOT NULL AND ` +
        `pg_logical_emit_message(true, 'stayhub.outbox', ${message}::text) IS NOT NULL AS written FROM b;`,
    );
  } else {
    // The service writes the booking and its outbox row in one statement (bookings.repository.ts).
    // One row per message (what the service writes), or one per subscribed handler. Every row is
    // grouped by the host and owned by the guest, with the topic's priority and a turn, as enqueue
    // writes it: a queue that fans out keeps the same turns, and K rows then write K times one's
    // index entries.
    const turnOf = variant === 'given-turn' ? '1' : `outbox_turn(${who.join(', ')}, ${BOOKING_PRIORITY})`;
    const turn = `, ${BOOKING_PRIORITY}, ${who.join(', ')}, ${turnOf}`;
    const [columns, key, values, from] =
      fanOutTo.length === 0
        ? [', priority, group_id, owner_id, turn', 'b.public_id', turn, 'FROM b']
        : [
            ', priority, group_id, owner_id, turn, lane, origin_id',
            "h.name || '@' || b.public_id",
            `${turn}, h.name, b.public_id`,
            `FROM b, unnest(ARRAY[${fanOutTo.map((h) => `'${h}'`).join(', ')}]) AS h(name)`,
          ];
    lines.push(
      `WITH b AS (${insertBooking}), ` +
        `o AS (INSERT INTO outbox (topic, key, payload${columns}) SELECT 'booking.created', ${key}, ${payload}${values} ${from} ` +
        `RETURNING public_id) SELECT b.*${variant === 'in-transaction' ? ", (SELECT pg_notify('outbox', o.public_id::text) FROM o)" : ''} FROM b;`,
    );
  }
  lines.push('END;');
  if (variant === 'notify-after-commit') lines.push("SELECT pg_notify('outbox', 'booking.created');");
  return lines.join('\n') + '\n';
}

/** The first free day for pgbench's properties: every earlier run's stays end before it. */
const pgbenchBaseDay = (f: ApiFixture) =>
  withClient(f.url, async (c) => {
    const { rows } = await c.query<{ d: number }>(
      'select coalesce(max(check_out) - current_date, 0)::int + 1 as d from bookings where property_id between $1 and $2',
      [f.pgbench.pmin, f.pgbench.pmin + f.pgbench.nprops - 1],
    );
    return rows[0]!.d;
  });

/**
 * The booking transaction (`variant`, by default what the service sends) at `clients`, for
 * pgbenchSeconds (or pgbenchTransactions a client, smoke), on the fixture's own properties.
 */
export async function pgbenchBookings(
  f: ApiFixture,
  P: Pick<BenchParams, 'pgbenchSeconds' | 'pgbenchTransactions'>,
  clients: number,
  opts: { variant?: OutboxVariant; mode?: PgbenchMode; fanOutTo?: readonly string[] } = {},
): Promise<PgbenchRun> {
  const r = await runPgbench({
    url: f.url,
    script: bookingScript(opts.variant ?? 'notify-after-commit', opts.fanOutTo),
    clients,
    seconds: P.pgbenchSeconds,
    transactionsPerClient: P.pgbenchTransactions,
    vars: { k: 0, base: await pgbenchBaseDay(f), ...f.pgbench },
    mode: opts.mode,
  });
  if (r.failed > 0) console.warn(`  ! pgbench: ${r.failed} failed transactions`);
  return r;
}
