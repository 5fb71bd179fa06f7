-- Turns per owner as well as per group (ADR 0039).
--
-- A group (a host's public id) got one message per turn, and a group with nothing waiting started
-- at the head of the queue. So 2,400 messages each in a group of its own all got the head's turn,
-- and a quiet host's confirmation written after them got it too: the id broke the tie, and it was
-- claimed after all 2,400 (a quiet host's confirmations waited p50 41 s, max 54 s; beside the same
-- flood in one group, p50 0.18 s). Whoever writes through many groups (one guest booking the properties of many hosts,
-- or one person behind many accounts) made a queue of its own that nobody could pass.
--
-- Now a message also names its owner: the account whose action wrote it (the guest who booked,
-- whoever cancelled, the host who edited). Its turn is the latest of the head, its group's latest
-- turn + 1 (as before) and its owner's latest turn + 1: an owner gets one message per turn however
-- many groups it writes through, and a group one message per turn however many owners write into
-- it. A message that names no owner is its group's (enqueue passes the group), so existing callers
-- keep their order.
--
-- The upgrade path: during a rollout the previous release's API still writes with
-- outbox_turn(grp, prio), which stays as it was (its rows have no owner, and their turns are
-- computed as before); its worker claims by (priority, turn, id) as before: the claim does not
-- change. Neither `owner_id` nor its index is touched by a claim or a lease extension (HOT updates,
-- ADR 0022). A later migration may drop the two-argument outbox_turn once no release calls it.
--
-- Adding the column rewrites nothing (nullable, no default). The index is built on every
-- partition while writes to the outbox wait; every existing row has no owner, so it stays empty,
-- but each partition is read once (like migration 0014: about 0.4 s per million rows kept).
ALTER TABLE "outbox" ADD COLUMN "owner_id" text;--> statement-breakpoint
-- An owner's latest turn in a priority: one backward probe, read by outbox_turn(grp, own, prio).
CREATE INDEX "outbox_owner_turn_idx" ON "outbox" USING btree ("owner_id","priority","turn") WHERE status = 'PENDING' and turn is not null and owner_id is not null;--> statement-breakpoint
-- A new message's turn in priority `prio`, for group `grp` and owner `own`: the latest of
--   - the turn at the head of the priority's queue (the lowest turn still PENDING, in flight
--     included): an owner and a group with nothing waiting start there;
--   - the group's latest PENDING turn + 1: a group's messages are one turn apart, whoever wrote them;
--   - the owner's latest PENDING turn + 1: an owner's messages are one turn apart, whatever group
--     each is in. So 2,400 single-message groups of one owner hold turns head … head + 2,399, and
--     another owner's next message lands at the head, claimed in the next claim.
-- Three probes, each the first entry of a partial index per partition read; the same window of
-- days as outbox_turn(grp, prio) (migration 0014), for the same reason. A null group or owner adds
-- nothing. No lock and no counter row: two transactions of one owner writing at the same moment
-- may share a turn (the id breaks the tie), as two of one group may.
CREATE FUNCTION outbox_turn(grp text, own text, prio integer) RETURNS bigint
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
               limit 1), 0),
    coalesce((select o.turn + 1 from outbox o
               where o.owner_id = own and o.priority = prio and o.status = 'PENDING' and o.turn is not null
                 and o.created_at > now() - interval '1 day' and o.created_at < now() + interval '1 day'
               order by o.turn desc
               limit 1), 0))
$$;
