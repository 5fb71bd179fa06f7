-- Messages written to the WAL instead of the table, made into rows by the worker (ADR 0056).
--
-- With OUTBOX_WRITES=wal, enqueue writes no row: it writes its message with
-- pg_logical_emit_message(true, 'stayhub.outbox', <json>) in the caller's transaction, which costs
-- the booking a WAL record and no heap tuple or index entry. The message goes with a rollback
-- and exists after a commit, as the row did. A logical replication slot (pgoutput, over a
-- publication of no table, so only messages come out of it) gives the messages back in commit
-- order, and outbox_materialize makes them rows, the same rows enqueue writes on the table path:
-- everything from the row on (the claim, the lease, turns, DONE, the purge) does not know which
-- way a message came.
--
-- Where the rows made from a slot end: the position in the WAL up to which this slot's messages are
-- rows, written in the same transaction as those rows. Moving a slot is not transactional, so a
-- slot can be behind the rows (a crash between their commit and the move): what it gives again up
-- to here is skipped, never made twice. One row per slot, updated once per call that made rows.
CREATE TABLE IF NOT EXISTS outbox_wal_position (
  slot text PRIMARY KEY,
  done_to pg_lsn NOT NULL
);

-- The rows of messages a running worker received from the slot's stream (src/outbox/wal-stream.ts),
-- each with the end of its transaction in the WAL: those at or before the recorded position are
-- rows already (a stream that started again from the slot's position gives them again) and are
-- skipped; the others are made, and the position moves to the last end, in this transaction. Each
-- distinct topic made gets the worker's wake-up. Returns the rows made.
--
-- The rows are the ones enqueue writes on the table path, made in one INSERT, in the order
-- received (commit order): ids follow it, and a key's messages keep the order they were written
-- in. Each row's turn is what outbox_turn would give it if the rows before it in the batch were
-- already there: outbox_turn is asked once per priority (the head), group and owner, and the
-- batch's own turns are carried from row to row here. One INSERT a batch, not one a row: a row
-- a statement cost 330 µs (the partition's routing set up each time, and the three probes), a
-- backlog of 20,000 messages took 24–28 s to be handled.
CREATE OR REPLACE FUNCTION outbox_make_rows(from_slot text, received json)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  recorded pg_lsn;
  last_end pg_lsn;
  e json;
  m json;
  todo json[] := '{}';
  turns bigint[] := '{}';
  heads jsonb := '{}';
  next_of jsonb := '{}';
  prio integer;
  grp text;
  own text;
  head bigint;
  of_group bigint;
  of_owner bigint;
  t bigint;
  made integer;
  topic text;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  SELECT p.done_to INTO recorded FROM outbox_wal_position p WHERE p.slot = from_slot FOR UPDATE;
  FOR e IN SELECT * FROM json_array_elements(received) LOOP
    last_end := (e->>'end')::pg_lsn;
    CONTINUE WHEN recorded IS NOT NULL AND last_end <= recorded;
    m := e->'message';
    prio := (m->>'priority')::int;
    grp := m->>'group';
    own := m->>'owner';
    head := (heads->>prio::text)::bigint;
    IF head IS NULL THEN
      head := outbox_turn(NULL::text, NULL::text, prio);
      heads := heads || jsonb_build_object(prio::text, head);
    END IF;
    -- 'g' and 'o' keep groups and owners apart; the priority, because turns are per priority.
    of_group := CASE WHEN grp IS NULL THEN head
                     ELSE coalesce((next_of->>('g' || prio || '/' || grp))::bigint, outbox_turn(grp, NULL::text, prio)) END;
    of_owner := CASE WHEN own IS NULL THEN head
                     ELSE coalesce((next_of->>('o' || prio || '/' || own))::bigint, outbox_turn(NULL::text, own, prio)) END;
    t := greatest(of_group, of_owner);
    IF grp IS NOT NULL THEN
      next_of := next_of || jsonb_build_object('g' || prio || '/' || grp, t + 1);
    END IF;
    IF own IS NOT NULL THEN
      next_of := next_of || jsonb_build_object('o' || prio || '/' || own, t + 1);
    END IF;
    todo := todo || m;
    turns := turns || t;
  END LOOP;
  INSERT INTO outbox (topic, payload, key, priority, group_id, owner_id, turn,
                      traceparent, tracestate, created_at, available_at)
  SELECT x.m->>'topic', (x.m->'payload')::jsonb, x.m->>'key', (x.m->>'priority')::int,
         x.m->>'group', x.m->>'owner', x.t, x.m->>'traceparent', x.m->>'tracestate',
         (x.m->>'at')::timestamptz, (x.m->>'at')::timestamptz
    FROM unnest(todo, turns) WITH ORDINALITY AS x(m, t, i)
   ORDER BY x.i;
  GET DIAGNOSTICS made = ROW_COUNT;
  IF last_end IS NOT NULL AND (recorded IS NULL OR last_end > recorded) THEN
    INSERT INTO outbox_wal_position AS p (slot, done_to) VALUES (from_slot, last_end)
    ON CONFLICT (slot) DO UPDATE SET done_to = excluded.done_to WHERE p.done_to < excluded.done_to;
  END IF;
  FOR topic IN SELECT DISTINCT x->>'topic' FROM unnest(todo) AS x LOOP
    PERFORM pg_notify('outbox', topic);
  END LOOP;
  RETURN made;
END
$function$;

-- The same, read by one statement from the slot (pg_logical_slot_peek_binary_changes): for the
-- worker's --once and --until-empty, and its tests, which read what is there and stop. A running
-- worker streams the slot instead (src/outbox/wal-stream.ts): each call here builds a decoding
-- context of its own, 15–25 ms of the server's CPU whatever it finds.
-- One call, one transaction, one round trip:
-- 1. Only one session reads the slot at a time (a slot serves one reader, and a second would get
--    an error): the others find the transaction lock taken and return at once. A transaction
--    lock, not a session one, so it works through PgBouncer's transaction mode.
-- 2. The slot is moved up to `move_to`, what the caller's previous call returned: committed rows'
--    end, or a stretch of WAL that held no message. A slot never moves back: a `move_to` behind it
--    (another worker moved it further) is left.
-- 3. The messages of the transactions committed before `upto` (the WAL flushed so far) are read
--    in commit order, at most `max_changes` changes (whole transactions). A transaction that ends
--    at or before the recorded position is already rows, and is skipped. The others' messages are
--    inserted one by one: each insert sees the rows before it, so a group's or owner's turns are
--    one apart as on the table path (outbox_turn). The id (and from it the public id) is given
--    here, so ids follow commit order and a key's messages keep the order they were written in.
-- 4. It returns where the next call may move the slot to, and how many rows it made. Each
--    distinct topic made gets the worker's wake-up, so every worker shares a big batch.
--
-- Logical decoding cannot run in a transaction that has written: the slot is read before the
-- inserts, and the function is called on its own.
CREATE OR REPLACE FUNCTION outbox_materialize(from_slot name, publication text, move_to pg_lsn, max_changes integer)
 RETURNS TABLE (next_move_to pg_lsn, made integer)
 LANGUAGE plpgsql
AS $function$
DECLARE
  upto pg_lsn;
  confirmed pg_lsn;
  recorded pg_lsn;
  last_end pg_lsn;
  changes integer := 0;
  r record;
  held text[] := '{}';
  received text[] := '{}';
  prefix_end integer;
  content_len integer;
BEGIN
  made := 0;
  IF NOT pg_try_advisory_xact_lock(727056) THEN
    next_move_to := move_to;
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT s.confirmed_flush_lsn INTO confirmed FROM pg_replication_slots s WHERE s.slot_name = from_slot;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the outbox''s replication slot % does not exist: messages written to the WAL before it was made are gone; make it with the worker''s start (OUTBOX_WRITES=wal) before any writer uses it', from_slot;
  END IF;
  SELECT p.done_to INTO recorded FROM outbox_wal_position p WHERE p.slot = from_slot;
  IF recorded IS NOT NULL AND (move_to IS NULL OR recorded > move_to) THEN
    move_to := recorded;
  END IF;
  IF move_to IS NOT NULL AND move_to > confirmed THEN
    PERFORM pg_replication_slot_advance(from_slot, move_to);
  END IF;
  -- Decoding reads only WAL already flushed: the flush position, not the insert position, so a
  -- commit still in the WAL buffers is read by the next call, never skipped by moving past it.
  upto := pg_current_wal_flush_lsn();
  next_move_to := upto;
  FOR r IN
    SELECT c.lsn, c.data
      FROM pg_logical_slot_peek_binary_changes(from_slot, upto, max_changes,
             'proto_version', '1', 'publication_names', publication, 'messages', 'true') c
  LOOP
    changes := changes + 1;
    -- pgoutput's records: 'B'egin, 'M'essage (flags, lsn, prefix\0, int32 length, content),
    -- 'C'ommit, whose row is at the transaction's end.
    IF get_byte(r.data, 0) = 67 THEN
      last_end := r.lsn;
      FOR i IN 1 .. coalesce(array_length(held, 1), 0) LOOP
        received := received || format('{"end":"%s","message":%s}', r.lsn, held[i]);
      END LOOP;
      held := '{}';
      CONTINUE;
    END IF;
    CONTINUE WHEN get_byte(r.data, 0) <> 77;
    prefix_end := position('\x00'::bytea IN substring(r.data FROM 11));
    CONTINUE WHEN convert_from(substring(r.data FROM 11 FOR prefix_end - 1), 'UTF8') <> 'stayhub.outbox';
    content_len := (get_byte(r.data, 10 + prefix_end) << 24) | (get_byte(r.data, 11 + prefix_end) << 16)
                 | (get_byte(r.data, 12 + prefix_end) << 8) | get_byte(r.data, 13 + prefix_end);
    held := held || convert_from(substring(r.data FROM 15 + prefix_end FOR content_len), 'UTF8');
  END LOOP;
  -- Stopped at max_changes: only the whole transactions read so far are done.
  IF changes >= max_changes THEN
    next_move_to := coalesce(last_end, move_to);
  END IF;
  -- The rows, the recorded position and the wake-up, as the stream's reader writes them.
  IF array_length(received, 1) > 0 THEN
    made := outbox_make_rows(from_slot, ('[' || array_to_string(received, ',') || ']')::json);
  END IF;
  RETURN NEXT;
END
$function$;
