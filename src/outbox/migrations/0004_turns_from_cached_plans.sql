-- A first delivery's turn from plans made once per connection instead of once per call (ADR 0055).
--
-- outbox_turn runs in every enqueue that gives a turn: the API's booking and cancellation among
-- them. Planned afresh on every call (force_custom_plan, ADR 0039), its three probes cost about
-- 470 µs a call on a day of 165,000 PENDING rows: most of what the outbox cost a booking (66 % of
-- the booking transaction's throughput with the turn, 26 % without it, pgbench at 8 clients).
-- A generic plan, made once per connection and reused, takes about 40 µs a call.
--
-- A generic plan does not know the group it probes for. Written as `group_id = grp`, the planner
-- then costed `grp` as any group of the statistics: with few groups there (a quiet day: two hosts,
-- then a new one), walking outbox_pending_turn_idx backwards and filtering on the group looked
-- cheap, and a group with nothing PENDING read the whole index (972 buffers for 20,000 PENDING
-- rows, against 6). So each probe is written so that only its own index can answer it at all: the
-- group (or owner) as a range of one value, which is not an equality the planner folds away, and
-- the order by that column first. outbox_pending_turn_idx cannot give that order without a sort of
-- every PENDING row of the priority, so the group's (owner's) index is the plan whatever the
-- statistics say; test/integration/outbox/turn-plan.test.ts holds it to that.
--
-- The turn it gives is the one it gave: the same three probes, the same window of days. Only the
-- function changes, so the writers of the release before (which call it, in its two-argument form
-- too) get it as they write, and no table is locked.
CREATE OR REPLACE FUNCTION outbox_turn(grp text, own text, prio integer)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE PARALLEL SAFE
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  lo timestamptz := now() - interval '1 day';
  hi timestamptz := now() + interval '1 day';
  head bigint;
  of_group bigint;
  of_owner bigint;
BEGIN
  -- The head of the priority's queue: only outbox_pending_turn_idx holds PENDING turns in order.
  select o.turn into head from outbox o
   where o.status = 'PENDING' and o.turn is not null and o.priority = prio
     and o.created_at > lo and o.created_at < hi
   order by o.turn
   limit 1;
  if grp is not null then
    -- The group's latest turn: a probe of outbox_group_turn_idx (group_id, priority, turn).
    select o.turn + 1 into of_group from outbox o
     where o.group_id >= grp and o.group_id <= grp and o.priority = prio
       and o.status = 'PENDING' and o.turn is not null and o.group_id is not null
       and o.created_at > lo and o.created_at < hi
     order by o.group_id desc, o.turn desc
     limit 1;
  end if;
  if own is not null then
    -- The owner's latest turn: a probe of outbox_owner_turn_idx (owner_id, priority, turn).
    select o.turn + 1 into of_owner from outbox o
     where o.owner_id >= own and o.owner_id <= own and o.priority = prio
       and o.status = 'PENDING' and o.turn is not null and o.owner_id is not null
       and o.created_at > lo and o.created_at < hi
     order by o.owner_id desc, o.turn desc
     limit 1;
  end if;
  return greatest(coalesce(head, 0), coalesce(of_group, 0), coalesce(of_owner, 0));
END
$function$;
