-- The claim's order: priorities per topic, and turns between groups (ADR 0033).
--
-- The claim took due messages oldest first through one index, (available_at, id) WHERE PENDING:
-- one host's 50,000 property changes, written a moment before another host's booking, were all
-- claimed before its confirmation email. Now every message carries its topic's `priority` and the
-- `group_id` the application passed (a host's public id), and a first delivery gets a `turn` when
-- it is written (outbox_turn, below). The claim walks two indexes (src/outbox/claim.ts):
--   - messages without a turn (retried, postponed, lane work, rows written without one), oldest
--     first: the old index, now partial on `turn is null`, so this walk never steps over the
--     first deliveries, however many are waiting;
--   - first deliveries, by priority, then turn: a new index, partial on `turn is not null`, so
--     this walk never reads a message that is backing off.
-- A message is in exactly one of the two, so inserting one writes one entry into them, as before.
-- Neither `turn` nor `priority` nor `group_id` is changed by a claim: a claim is still a HOT update
-- that writes no index entry (ADR 0022).
--
-- Rebuilding the old index reads every partition once and holds writes to the outbox (bookings)
-- until it is done, like migration 0010 (about 0.4 s per million rows kept, in memory). Existing
-- PENDING rows have no turn: the claim takes them oldest first, as before.
DROP INDEX "outbox_pending_available_idx";--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "priority" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "group_id" text;--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "turn" bigint;--> statement-breakpoint
CREATE INDEX "outbox_pending_turn_idx" ON "outbox" USING btree ("priority" DESC NULLS LAST,"turn","id") WHERE status = 'PENDING' and turn is not null;--> statement-breakpoint
-- A group's latest turn in a priority: one backward probe, read by outbox_turn.
CREATE INDEX "outbox_group_turn_idx" ON "outbox" USING btree ("group_id","priority","turn") WHERE status = 'PENDING' and turn is not null and group_id is not null;--> statement-breakpoint
CREATE INDEX "outbox_pending_available_idx" ON "outbox" USING btree ("available_at","id") WHERE status = 'PENDING' and turn is null;--> statement-breakpoint
-- A new message's turn in priority `prio` for group `grp` (start-time fair queuing with one unit
-- per message): the later of
--   - the turn at the head of the priority's queue (the lowest turn still PENDING, in flight
--     included): a group with nothing waiting starts there, next to the head, not behind the
--     backlog of another; and
--   - its group's latest PENDING turn + 1: a group's messages are one turn apart, so a group that
--     writes 50,000 messages holds turns head … head + 49,999, and every other group's next message
--     lands between them. Groups take turns, one message each, whatever their backlog.
-- A message without a group (grp null) starts at the head: without a group it cannot flood as one.
-- An empty queue starts at 0. Two probes, each the first entry of a partial index per partition
-- read. Only the partitions of the last day and the next are read (a message's created_at is its
-- transaction's start): a group's turns older than a day are not seen, and its next message starts
-- at the head. That loosens the order of a day-old backlog, never a message's delivery.
-- Concurrent writers see each other's committed turns only: two transactions of one group that
-- write at the same moment may share a turn, and the id breaks the tie. A turn orders; it never
-- delays a message that nothing else is waiting ahead of (the claim takes the lowest turns due).
CREATE FUNCTION outbox_turn(grp text, prio integer) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  select greatest(
    coalesce((select o.turn from outbox o
               where o.status = 'PENDING' and o.turn is not null and o.priority = prio
                 and o.created_at > now() - interval '1 day' and o.created_at < now() + interval '1 day'
               order by o.turn
               limit 1), 0),
    coalesce((select o.turn + 1 from outbox o
               where o.group_id = grp and o.priority = prio and o.status = 'PENDING' and o.turn is not null
                 and o.created_at > now() - interval '1 day' and o.created_at < now() + interval '1 day'
               order by o.turn desc
               limit 1), 0))
$$;
