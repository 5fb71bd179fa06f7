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
-- outbox_turn(grp, prio), which stays, giving the turns it gave (its rows have no owner); its
-- worker claims by (priority, turn, id) as before: the claim does not change. Neither `owner_id`
-- nor its index is touched by a claim or a lease extension (HOT updates, ADR 0022).
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
-- days as before (migration 0014), for the same reason. A null group or owner adds nothing. No
-- lock and no counter row: two transactions of one owner writing at the same moment may share a
-- turn (the id breaks the tie), as two of one group may.
--
-- PL/pgSQL, with the window's ends in variables and a plan made for each call's values: the SQL
-- function of migration 0014 is planned afresh on every call too, but with `now()` in its
-- conditions the planner cannot leave out any partition, and it costed every partition's indexes
-- for each probe. With the ends known when the probes are planned, only the two or three partitions
-- of the window are (beside 20,000 PENDING rows: 0.55 ms a call with three probes, against 2.2–3.1
-- ms for the SQL function's three; ADR 0039 has the INSERTs' figures). A plan made once and reused
-- (a generic plan) would cost less still, but a generic plan does not know the group: with few
-- groups in the statistics it walked the priority's whole index of turns instead of probing the
-- group's (1,280 buffers a probe against 2), so each call gets its own plan.
CREATE FUNCTION outbox_turn(grp text, own text, prio integer) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  lo timestamptz := now() - interval '1 day';
  hi timestamptz := now() + interval '1 day';
  head bigint;
  of_group bigint;
  of_owner bigint;
BEGIN
  select o.turn into head from outbox o
   where o.status = 'PENDING' and o.turn is not null and o.priority = prio
     and o.created_at > lo and o.created_at < hi
   order by o.turn
   limit 1;
  if grp is not null then
    select o.turn + 1 into of_group from outbox o
     where o.group_id = grp and o.priority = prio and o.status = 'PENDING' and o.turn is not null
       and o.created_at > lo and o.created_at < hi
     order by o.turn desc
     limit 1;
  end if;
  if own is not null then
    select o.turn + 1 into of_owner from outbox o
     where o.owner_id = own and o.priority = prio and o.status = 'PENDING' and o.turn is not null
       and o.created_at > lo and o.created_at < hi
     order by o.turn desc
     limit 1;
  end if;
  return greatest(coalesce(head, 0), coalesce(of_group, 0), coalesce(of_owner, 0));
END
$$;--> statement-breakpoint
-- The previous release's call, during a rollout (and bulk writers of our own that name no owner):
-- the same turn as migration 0014 gave it, at the cost of the function above.
CREATE OR REPLACE FUNCTION outbox_turn(grp text, prio integer) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  select outbox_turn(grp, null::text, prio)
$$;
