import { sql } from 'drizzle-orm';
import { bigint, bigserial, check, customType, index, integer, jsonb, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import { ts } from '../db/schema/columns.ts';

export const OUTBOX_STATUSES = ['PENDING', 'DONE', 'DEAD'] as const;
export type OutboxStatus = (typeof OUTBOX_STATUSES)[number];

/**
 * The transactional outbox: one row per event, written in the same transaction as the business
 * change it describes, so the event exists if and only if the change committed.
 *
 * Partitioned by day of created_at (migrations/0008_partitioned_outbox.sql, src/outbox/partitions.ts):
 * the primary key on id is each partition's own, as PostgreSQL allows no unique index on a
 * partitioned table without its partition key; one sequence keeps ids unique.
 */
export const outbox = pgTable(
  'outbox',
  {
    /** Internal order of writing; per-key ordering compares ids. */
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /**
     * The message's identity outside the database (admin API, logs, downstream dedup). Derived from
     * the row (outbox migration 0003, ADR 0051): a UUIDv7 of created_at carrying the id, written by
     * the outbox's insert trigger, so a lookup reads the day and the id out of it and probes that
     * day's primary key (src/outbox/public-id.ts), and no unique index is written. Days that hold
     * rows of the release before, whose public ids are random UUIDv7s, keep their unique index.
     */
    publicId: uuid('public_id').notNull(),
    /** An event name in the past tense ('order.placed'), never a command. */
    topic: text('topic').notNull(),
    /**
     * The aggregate the event is about (an application's public id of it). Messages sharing a
     * key are handled in the order they were written; different keys run in parallel.
     */
    key: text('key'),
    /** A snapshot of what the handlers need, taken when the event happened. */
    payload: jsonb('payload').notNull(),
    /** PENDING (new, backing off, or leased) | DONE | DEAD. */
    status: text('status', { enum: OUTBOX_STATUSES }).notNull().default('PENDING'),
    /** Claims so far. Counted at claim time, so a message that crashes its worker still dies. */
    attempts: integer('attempts').notNull().default(0),
    /**
     * When the message may be claimed: for a new message its creation time, after a failure the
     * backoff deadline. The key of the claim's index, so a claim never changes it (leasedUntil).
     */
    availableAt: ts('available_at').notNull().defaultNow(),
    /** The current claim's token; settling is fenced on it so a late worker cannot overwrite a newer claim. */
    claimId: uuid('claim_id'),
    claimedAt: ts('claimed_at'),
    /**
     * While claimed, the lease's deadline: the message is claimable again once it passes. In no
     * index, so a claim and a lease extension write no index entry (ADR 0022). Due means
     * `available_at <= now() and (leased_until is null or leased_until <= now())`.
     */
    leasedUntil: ts('leased_until'),
    /** Handlers that have finished for this message: a retry re-runs only the others. */
    handlersDone: text('handlers_done')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    /** When the message became DONE or DEAD. */
    processedAt: ts('processed_at'),
    /** The last failure (handler, error class, message), so a DEAD row explains itself. */
    lastError: text('last_error'),
    /**
     * When the event happened. A lane message (below) carries the original's, so its age is the
     * event's, not the deferral's.
     */
    createdAt: ts('created_at').notNull().defaultNow(),
    /**
     * Null for a message as written. Otherwise this row is a lane message: the work of one handler
     * (its name is here) that had to wait, moved out of its message so that only that handler's
     * later work of the key waits behind it (src/outbox/lanes.ts). Its key is `<lane>@<key>`.
     */
    lane: text('lane'),
    /** A lane message's original: the public id its handler sees as the message id (the relay's Nats-Msg-Id). */
    originId: uuid('origin_id'),
    /**
     * The W3C trace context of the span that wrote the event (the request that caused it), so the
     * worker's handling continues that trace (src/telemetry/tracing.ts, placeAfterHop). Null when
     * tracing was off. A lane message carries its original's.
     */
    traceparent: text('traceparent'),
    tracestate: text('tracestate'),
    /**
     * Claimed before every lower one: its topic's priority, which the application registers
     * (TOPIC_PRIORITY in src/messages/topics.ts) and enqueue writes. Higher first (ADR 0033).
     */
    priority: integer('priority').notNull().default(0),
    /**
     * Whose work this is, for fairness: what the application passed to enqueue (a host's public
     * id). Messages of one group take turns with other groups' (`turn`). Null: no group.
     */
    groupId: text('group_id'),
    /**
     * A first delivery's place in its priority (outbox_turn, migrations/0015): the latest of the
     * turn at the head of the queue, the group's previous turn + 1 and the owner's previous turn + 1;
     * so a flooding group's or owner's messages are spread out and another's next message lands
     * near the head. Null once the message
     * failed, was postponed or handed to a lane, and for rows written without one: available_at
     * then orders it, oldest first.
     */
    turn: bigint('turn', { mode: 'number' }),
    /**
     * Who caused it, for fairness above the group: the account whose action wrote it (the guest
     * who booked, whoever cancelled, the host who edited), as enqueue was given it, or its group.
     * An owner's messages take turns with other owners' (`turn`) however many groups they are in
     * (ADR 0039). Null: no owner (rows written without one, or by the release before).
     */
    ownerId: text('owner_id'),
  },
  (t) => [
    check('outbox_status_check', sql`${t.status} in ('PENDING', 'DONE', 'DEAD')`),
    /*
     * The claim's index for messages without a turn (retried, postponed, lane work: ADR 0033).
     * Partial, because DONE rows come to outnumber live ones by orders of magnitude: this index
     * holds only what the worker can still claim, so the claim stays as fast with a million DONE
     * rows behind it as with none, and it walks rows already in available_at order.
     */
    index('outbox_pending_available_idx')
      .on(t.availableAt, t.id)
      .where(sql`status = 'PENDING' and turn is null`),
    /*
     * The claim's other walk (ADR 0033): first deliveries, by priority, then turn. Partial on
     * `turn is not null`, so neither walk steps over the other's rows, and a message backing off
     * (turn null) is never read by this one.
     */
    index('outbox_pending_turn_idx')
      .on(t.priority.desc(), t.turn, t.id)
      .where(sql`status = 'PENDING' and turn is not null`),
    /* A group's last turn in a priority, read by enqueue (outbox_turn, migrations/0014 and 0015): one probe. */
    index('outbox_group_turn_idx')
      .on(t.groupId, t.priority, t.turn)
      .where(sql`status = 'PENDING' and turn is not null and group_id is not null`),
    /* An owner's last turn in a priority, read by enqueue (outbox_turn, migrations/0015): one probe. */
    index('outbox_owner_turn_idx')
      .on(t.ownerId, t.priority, t.turn)
      .where(sql`status = 'PENDING' and turn is not null and owner_id is not null`),
    /*
     * Per-key ordering: "is an older message of this key still pending?" is one probe here, over
     * that key's live rows. Partial on the check's own words (`not in ('DONE', 'DEAD')`), so a DONE
     * writes no entry here and the index is the queue's size, not the history's; no other index
     * can serve the check, whatever the statistics say (migrations/0010, ADR 0023). Keyless rows
     * are left out so that a lookup by id alone cannot skip-scan it (migrations/0008).
     */
    index('outbox_key_idx')
      .on(t.key, t.id)
      .where(sql`key is not null and status not in ('DONE', 'DEAD')`),
    /*
     * No index of PENDING rows by created_at (migration 0001, ADR 0051): the queue's depth and age
     * are read through the two walks above, which hold every PENDING row between them.
     */
    /* Dead letters are few and looked at by people. */
    index('outbox_dead_idx')
      .on(t.topic, t.id)
      .where(sql`status = 'DEAD'`),
    /*
     * DONE rows by processed_at, as a summary of each range of pages rather than an entry a row
     * (migration 0002, ADR 0051): a window of processed_at (the last hour's stats, a reconcile's
     * window, the retention's cutoff) reads only the pages whose range can hold it; finished
     * messages in order are read by day, in primary-key order (finished-page.ts).
     */
    index('outbox_done_processed_brin')
      .using('brin', t.processedAt)
      .with({ autosummarize: 'on' })
      .where(sql`status = 'DONE'`),
  ],
);

/** Who replayed which dead letters, when (admin API and `npm run outbox:requeue`). */
export const outboxAudit = pgTable('outbox_audit', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  /**
   * The admin's user id, or null for a command-line run. The application's migrations make it a
   * foreign key to its users; the outbox knows no users table.
   */
  actorUserId: bigint('actor_user_id', { mode: 'number' }),
  actor: text('actor').notNull(),
  action: text('action').notNull(),
  /** What was asked for: {ids}, {topic} or {allDead}. */
  criteria: jsonb('criteria').notNull(),
  affected: integer('affected').notNull(),
  messageIds: uuid('message_ids').array().notNull(),
  createdAt: ts('created_at').notNull().defaultNow(),
});

/**
 * The outbox's migrations this database has applied (src/outbox/migrate.ts makes this table
 * itself, before the first of them, with the same columns).
 */
export const outboxMigrationRecords = pgTable('outbox_migrations', {
  /** The file's number: src/outbox/migrations/NNNN_name.sql. */
  id: integer('id').primaryKey(),
  name: text('name').notNull(),
  appliedAt: ts('applied_at').notNull().defaultNow(),
});

/** A position in the WAL, as PostgreSQL writes it (`16/B374D848`). */
const pgLsn = customType<{ data: string }>({ dataType: () => 'pg_lsn' });

/**
 * OUTBOX_WRITES=wal: per replication slot, the position up to which its messages are rows, written
 * with those rows (src/outbox/migrations/0005_messages_from_the_wal.sql says why).
 */
export const outboxWalPosition = pgTable('outbox_wal_position', {
  slot: text('slot').primaryKey(),
  doneTo: pgLsn('done_to').notNull(),
});
