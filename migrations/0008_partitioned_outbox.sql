-- The outbox, partitioned by day of created_at (ADR 0019). A day's messages live in a table of
-- their own, outbox_YYYYMMDD (UTC), and once every row in it is DONE and past the retention the
-- worker's housekeeping detaches it CONCURRENTLY and drops it (src/outbox/partitions.ts): a DROP
-- writes a few KiB of WAL and gives the disk back at once, where deleting a million rows wrote
-- 368 MiB of WAL and left the table as large as before.
--
-- What changes for an existing outbox: nothing is copied. The table is renamed outbox_until_<day>
-- and attached as the first partition, covering everything created before tomorrow (UTC); its
-- indexes already match the new table's and are attached, not rebuilt, except the key index,
-- made partial (below). ATTACH reads the table once to check that bound. The days after it are
-- made ahead (outbox_ensure_partitions, below); no DEFAULT partition is made, because
-- DETACH … CONCURRENTLY refuses a table that has one.
--
-- Keys and uniqueness. A unique index on a partitioned table must hold the partition key, so the
-- parent has none: every partition has its own primary key (id) and unique public_id, which is
-- what the claim, the settles and the admin look up by. Ids stay unique across partitions because
-- one sequence gives them all (now owned by the parent, so dropping the first partition does not
-- take the sequence with it); public ids are time-ordered random UUIDs (migration 0007).
DO $$
DECLARE
  tomorrow timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day';
  first_part text := 'outbox_until_' || to_char(tomorrow AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
  ALTER TABLE outbox RENAME TO outbox_legacy_tmp;
  EXECUTE format('ALTER TABLE outbox_legacy_tmp RENAME TO %I', first_part);
  -- The old indexes' names go to the parent's indexes.
  EXECUTE format('ALTER INDEX outbox_pending_available_idx RENAME TO %I', first_part || '_pending_available_idx');
  -- Rebuilt below as a partial index: the one index this migration makes the old rows anew.
  DROP INDEX outbox_key_idx;
  EXECUTE format('ALTER INDEX outbox_dead_idx RENAME TO %I', first_part || '_dead_idx');
  EXECUTE format('ALTER INDEX outbox_done_processed_idx RENAME TO %I', first_part || '_done_processed_idx');
  EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT outbox_pkey TO %I', first_part, first_part || '_pkey');
  EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT outbox_public_id_unique TO %I', first_part, first_part || '_public_id_key');

  CREATE TABLE outbox (
    id bigint NOT NULL DEFAULT nextval('outbox_id_seq'),
    public_id uuid NOT NULL DEFAULT outbox_uuid_v7(),
    topic text NOT NULL,
    key text,
    payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'PENDING',
    attempts integer NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    claim_id uuid,
    claimed_at timestamptz,
    handlers_done text[] NOT NULL DEFAULT '{}'::text[],
    processed_at timestamptz,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    lane text,
    origin_id uuid,
    CONSTRAINT outbox_status_check CHECK (status IN ('PENDING', 'DONE', 'DEAD'))
  ) PARTITION BY RANGE (created_at);
  ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;

  -- The column order must be the old table's for ATTACH; it is (0000, then 0006's two columns).
  EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', first_part, tomorrow);
END $$;--> statement-breakpoint
-- The claim's index (src/outbox/claim.ts): partial, so it holds only what can still be claimed.
CREATE INDEX outbox_pending_available_idx ON outbox (available_at, id) WHERE status = 'PENDING';--> statement-breakpoint
-- The per-key check's index: every keyed row, so its size never depends on statistics of status
-- (migration 0003). Keyless rows are left out so that no lookup by id alone can use it: on
-- PostgreSQL 18, whose btree skip scan can serve `id = any(…)` from a (key, id) index, the claim's
-- UPDATE, planned while a day's partition was still empty, walked this index instead of the
-- primary key (2,159 buffers for 500 rows of 5,000, growing with the day). `key = …`, which every
-- use of it has, implies `key is not null`.
CREATE INDEX outbox_key_idx ON outbox (key, id) WHERE key IS NOT NULL;--> statement-breakpoint
-- The span of days that still hold PENDING messages: the claim reads its ends (min and max,
-- one probe each) and looks for due messages and for older messages of a key only in the
-- partitions of those days, not in every day kept for the retention (src/outbox/claim.ts).
CREATE INDEX outbox_pending_created_idx ON outbox (created_at) WHERE status = 'PENDING';--> statement-breakpoint
CREATE INDEX outbox_dead_idx ON outbox (topic, id) WHERE status = 'DEAD';--> statement-breakpoint
CREATE INDEX outbox_done_processed_idx ON outbox (processed_at) WHERE status = 'DONE';
--> statement-breakpoint
-- The days ahead: a partition per UTC day from the last one's end to `days_ahead` days after
-- `at`'s (a week by default), each made as a table of its own and then ATTACHed. ATTACH takes SHARE UPDATE EXCLUSIVE
-- on the outbox, which lets inserts, claims and settles go on, where CREATE TABLE … PARTITION OF
-- would take ACCESS EXCLUSIVE and queue every booking behind whatever transaction is using the
-- outbox; the new table is empty, so ATTACH's check of its rows reads nothing. lock_timeout bounds
-- the wait for that lock (a call that times out leaves the days to the next one, a week ahead).
-- Two callers at once take turns on the advisory lock, and the second finds the days made.
-- Called after every migration run (src/db/migrate.ts) and by the worker's housekeeping
-- (src/outbox/partitions.ts). Returns the names of the partitions made.
CREATE FUNCTION outbox_ensure_partitions(at timestamptz DEFAULT now(), days_ahead integer DEFAULT 7) RETURNS text[]
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
    EXECUTE format('CREATE TABLE %I (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id), ADD UNIQUE (public_id)', name);
    EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, day, day + interval '1 day');
    made := made || name;
    day := day + interval '1 day';
  END LOOP;
  RETURN made;
END $$;
