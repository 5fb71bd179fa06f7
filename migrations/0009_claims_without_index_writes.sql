-- Claims that write no index entries (ADR 0022). The claim used to move available_at to the lease's
-- deadline; available_at is a key of the claim's own index, so every claim wrote a new row version
-- AND an entry in each of the partition's five indexes. The lease now has a column of its own,
-- leased_until, in no index, so a claim (attempts, claim_id, claimed_at, leased_until) can be a
-- HOT update: the new row version goes on the same page and no index is touched.
--
-- A HOT update needs room on the row's page, so every partition leaves 60 % of each page free
-- when rows are inserted (fillfactor 40): the claimed version is larger than the one inserted
-- (claim_id, claimed_at and leased_until were null), so half a page was not always enough. On the
-- drain floor (our claim and DONE statements alone, 20,000 messages, batch 1,000, five alternating
-- runs): as before 28,867 msg/s; fillfactor 50, 86 % of claims HOT, 36,646; fillfactor 40, 99 %
-- HOT, 38,008. The price is a partition 2.5 times as many pages for the same rows while they live;
-- a day is dropped whole after the retention (ADR 0019).
--
-- Leases held when this runs were written by the previous claim, into available_at. They stay
-- there and end as they would have: such a row is not due until its available_at passes, and
-- leased_until is null. A worker of the previous version must not run beside one of this version:
-- it would not see leased_until and could claim a message this version holds (CHANGELOG).
ALTER TABLE outbox ADD COLUMN leased_until timestamptz;--> statement-breakpoint
DO $$
DECLARE
  part text;
BEGIN
  -- Pages already written keep their rows where they are; the setting applies to pages filled from now on.
  FOR part IN SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'outbox'::regclass LOOP
    EXECUTE format('ALTER TABLE %s SET (fillfactor = 40)', part);
  END LOOP;
END $$;--> statement-breakpoint
-- The days ahead, as in migration 0008, each made with the same free space on its pages
-- (a partitioned table cannot carry storage parameters for its partitions: each gets its own).
CREATE OR REPLACE FUNCTION outbox_ensure_partitions(at timestamptz DEFAULT now(), days_ahead integer DEFAULT 7) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
  until timestamptz := date_trunc('day', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + (days_ahead + 1) * interval '1 day';
  day timestamptz;
  name text;
  made text[] := '{}';
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  PERFORM pg_advisory_xact_lock(727019);
  SELECT max((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz)
    INTO day
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = 'outbox'::regclass;
  day := coalesce(day, date_trunc('day', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC');
  WHILE day < until LOOP
    name := 'outbox_' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD');
    EXECUTE format('CREATE TABLE %I (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 40)', name);
    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id), ADD UNIQUE (public_id)', name);
    EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, day, day + interval '1 day');
    made := made || name;
    day := day + interval '1 day';
  END LOOP;
  RETURN made;
END $$;
