-- The head of a priority's queue read from where this connection last found it (ADR 0060).
--
-- outbox_turn's head probe asks for the lowest PENDING turn of a priority: the first live entry of
-- outbox_pending_turn_idx (priority, turn, id). The entries before it are the messages finished
-- since, and while a snapshot is held open (a long report, pg_dump, a transaction left idle) none
-- of them can be removed or marked dead: every probe walks all of them, each to a heap visit. Over
-- a four-minute hold the producer's INSERT went from 0.5–0.7 ms to 7–14 ms, growing with the hold,
-- and every booking pays it.
--
-- Where the walk may start: a message is written at or past the head of its moment, with an id
-- later than any PENDING then. So once a probe has found the head at id h, every message PENDING
-- after it either has a turn above 0 or an id of h or later: in the index's order, none is before
-- (turn 0, id h). Each connection keeps that id, in a setting of its session
-- (stayhub.outbox_head_<priority>), and its next probe starts at (0, h): it walks the turn-0
-- messages finished since its last probe, not every message finished under the snapshot. When the
-- probe finds nothing, nothing is PENDING and the head is 0, as the probe from the start says; what
-- comes next takes an id past the id sequence's last value, and the probe after starts there.
--
-- Messages of turns above 0 finished under the snapshot are still walked, as before: turns above
-- 0 are a group's or an owner's second message and later, while the first waits. At a steady rate
-- nearly every message has turn 0; under a flood the turns climb and the walk with them.
--
-- What it does not see that the probe from the start would: a message of turn 0 whose transaction
-- took its id before the probe found the head and committed after (ids are given at INSERT, rows
-- seen at COMMIT). Its turn is still the one it was given; only the head read for the next new
-- group can be later than the true one while it waits (turn 0 either way if anything of turn 0 is
-- PENDING). A turn orders fairness between groups; per-key order, the lease and delivery do not
-- read it.
--
-- The place is a hint: a pooler that hands the server connection to another client hands the hint
-- with it, and it is as true for that client; a reset (DISCARD ALL) or a setting that does not
-- parse starts the probe from the start. The group's and the owner's probes are as before. Only
-- the function changes: writers of the release before, which call it, get it as they write, and no
-- table is locked.
CREATE OR REPLACE FUNCTION outbox_turn(grp text, own text, prio integer)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE PARALLEL RESTRICTED
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  lo timestamptz := now() - interval '1 day';
  hi timestamptz := now() + interval '1 day';
  -- A setting's name takes no '-': a negative priority is spelled with an 'm'.
  place_name text := 'stayhub.outbox_head_' || translate(prio::text, '-', 'm');
  place text := current_setting(place_name, true);
  from_id bigint := 0;
  head bigint;
  head_id bigint;
  of_group bigint;
  of_owner bigint;
BEGIN
  IF place ~ '^[0-9]{1,18}$' THEN
    from_id := place::bigint;
  END IF;
  -- The head of the priority's queue: only outbox_pending_turn_idx holds PENDING turns in order,
  -- and its walk starts at (turn 0, the id kept).
  select o.turn, o.id into head, head_id from outbox o
   where o.status = 'PENDING' and o.turn is not null and o.priority = prio
     and (o.turn, o.id) >= (0, from_id)
     and o.created_at > lo and o.created_at < hi
   order by o.turn, o.id
   limit 1;
  IF head IS NULL THEN
    head := 0;
    select s.last_value into head_id from outbox_id_seq s;
  END IF;
  IF head_id <> from_id THEN
    PERFORM set_config(place_name, head_id::text, false);
  END IF;
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
  return greatest(head, coalesce(of_group, 0), coalesce(of_owner, 0));
END
$function$;
