-- The outbox's storage as the application's migrations 0000–0018 left it, in one place: its table
-- (partitioned by day of created_at), its indexes, its audit of replays and its SQL functions.
-- Written to make all of it in an empty database and to change nothing in a database that already
-- holds it (every statement is IF NOT EXISTS, or CREATE OR REPLACE of the same text), so a
-- database of the previous release adopts it as it is. Why each index and column is as it is:
-- src/outbox/schema.ts, which declares the same table for drizzle's queries.
-- src/outbox/migrate.ts applies it; test/integration/outbox/migrations.test.ts keeps it equal to
-- what the application's migrations make.

-- Time-ordered UUIDs (v7) for public ids: new ids land at the right edge of their unique index
-- (ADR 0018).
CREATE OR REPLACE FUNCTION outbox_uuid_v7()
 RETURNS uuid
 LANGUAGE sql
 PARALLEL SAFE
AS $function$
  SELECT encode(
           set_bit(set_bit(
             overlay(uuid_send(gen_random_uuid())
                     placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                     FROM 1 FOR 6),
             52, 1), 53, 1),
           'hex')::uuid
$function$;

CREATE TABLE IF NOT EXISTS outbox (
  id bigserial NOT NULL,
  public_id uuid NOT NULL DEFAULT outbox_uuid_v7(),
  topic text NOT NULL,
  key text,
  payload jsonb NOT NULL,
  status text NOT NULL DEFAULT 'PENDING',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamp with time zone NOT NULL DEFAULT now(),
  claim_id uuid,
  claimed_at timestamp with time zone,
  handlers_done text[] NOT NULL DEFAULT '{}'::text[],
  processed_at timestamp with time zone,
  last_error text,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  lane text,
  origin_id uuid,
  leased_until timestamp with time zone,
  traceparent text,
  tracestate text,
  priority integer NOT NULL DEFAULT 0,
  group_id text,
  turn bigint,
  owner_id text,
  CONSTRAINT outbox_status_check CHECK (status IN ('PENDING', 'DONE', 'DEAD'))
) PARTITION BY RANGE (created_at);

-- The primary key (id) and the unique public_id are each day partition's own (PostgreSQL allows no
-- unique index on a partitioned table without its partition key): outbox_ensure_partitions adds
-- them to each day it makes.

-- The claim's two walks (ADR 0033): retried, postponed and lane work by available_at; first
-- deliveries by priority, then turn. Partial, so the DONE history never enters them.
CREATE INDEX IF NOT EXISTS outbox_pending_available_idx ON outbox (available_at, id)
  WHERE status = 'PENDING' AND turn IS NULL;
CREATE INDEX IF NOT EXISTS outbox_pending_turn_idx ON outbox (priority DESC NULLS LAST, turn, id)
  WHERE status = 'PENDING' AND turn IS NOT NULL;
-- A group's and an owner's last turn in a priority, read by enqueue (outbox_turn): one probe each.
CREATE INDEX IF NOT EXISTS outbox_group_turn_idx ON outbox (group_id, priority, turn)
  WHERE status = 'PENDING' AND turn IS NOT NULL AND group_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_owner_turn_idx ON outbox (owner_id, priority, turn)
  WHERE status = 'PENDING' AND turn IS NOT NULL AND owner_id IS NOT NULL;
-- Per-key order: "is an older message of this key still live?" is one probe (ADR 0023).
CREATE INDEX IF NOT EXISTS outbox_key_idx ON outbox (key, id)
  WHERE key IS NOT NULL AND status NOT IN ('DONE', 'DEAD');
-- The queue's depth and age; dead letters, for people; DONE rows by age, for the retention.
CREATE INDEX IF NOT EXISTS outbox_pending_created_idx ON outbox (created_at) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON outbox (topic, id) WHERE status = 'DEAD';
CREATE INDEX IF NOT EXISTS outbox_done_processed_idx ON outbox (processed_at) WHERE status = 'DONE';

-- Who replayed which dead letters, when. An application may make actor_user_id a foreign key to
-- its users (StayHub's migrations/0000_init.sql does); the outbox knows no users table.
CREATE TABLE IF NOT EXISTS outbox_audit (
  id bigserial PRIMARY KEY,
  actor_user_id bigint,
  actor text NOT NULL,
  action text NOT NULL,
  criteria jsonb NOT NULL,
  affected integer NOT NULL,
  message_ids uuid[] NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now()
);

-- A first delivery's turn in its priority (ADR 0033, 0039): the latest of the turn at the head of
-- the queue, the group's previous turn + 1 and the owner's previous turn + 1.
CREATE OR REPLACE FUNCTION outbox_turn(grp text, own text, prio integer)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE PARALLEL SAFE
 SET plan_cache_mode TO 'force_custom_plan'
AS $function$
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
$function$;

-- The two-argument form, which writers of the release before the owner's turn call.
CREATE OR REPLACE FUNCTION outbox_turn(grp text, prio integer)
 RETURNS bigint
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  select outbox_turn(grp, null::text, prio)
$function$;

-- The day partitions, from the last one's end to days_ahead days after `at` (ADR 0019, 0025), at
-- fillfactor 40 so that a claim's update stays on its page (ADR 0022).
CREATE OR REPLACE FUNCTION outbox_ensure_partitions(at timestamp with time zone DEFAULT now(), days_ahead integer DEFAULT 7)
 RETURNS text[]
 LANGUAGE plpgsql
AS $function$
DECLARE
  first_day timestamptz := date_trunc('day', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  last_end timestamptz;
  day timestamptz;
  name text;
  made text[] := '{}';
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  PERFORM pg_advisory_xact_lock(727019);
  -- From the last partition's end if it is behind `at` (nothing made days for a while: as before),
  -- else from `at`'s day. Never earlier: a day before both is one the purge dropped.
  SELECT max((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz)
    INTO last_end
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = 'outbox'::regclass;
  first_day := least(first_day, coalesce(last_end, first_day));
  FOR day IN SELECT generate_series(first_day, date_trunc('day', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + days_ahead * interval '1 day', interval '1 day') LOOP
    -- Covered: a partition whose range holds the day's first instant (MINVALUE has no quoted bound).
    CONTINUE WHEN EXISTS (
      SELECT 1
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = 'outbox'::regclass
         AND coalesce((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\)'))[1]::timestamptz <= day, true)
         AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz > day);
    name := 'outbox_' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF to_regclass(format('%I', name)) IS NULL THEN
      EXECUTE format('CREATE TABLE %I (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 40)', name);
      EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id), ADD UNIQUE (public_id)', name);
      EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, day, day + interval '1 day');
    ELSE
      BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = format('%I', name)::regclass AND contype = 'p') THEN
          EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id), ADD UNIQUE (public_id)', name);
        END IF;
        EXECUTE format('ALTER TABLE %I SET (fillfactor = 40)', name);
        EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, day, day + interval '1 day');
      EXCEPTION
        -- Another session holds the outbox longer than lock_timeout: not the table's fault.
        WHEN lock_not_available THEN RAISE;
        WHEN OTHERS THEN
        RAISE EXCEPTION 'the outbox has no partition for %, and the table % that has its name cannot be attached as it (%): rename it (ALTER TABLE % RENAME TO %) or drop it, then start again',
          to_char(day AT TIME ZONE 'UTC', 'YYYY-MM-DD'), name, SQLERRM, quote_ident(name), quote_ident(name || '_leftover');
      END;
    END IF;
    made := made || name;
  END LOOP;
  RETURN made;
END $function$;
