-- The lean storage's third cut (ADR 0051): a message's public id is derived from its row, a UUIDv7
-- of its created_at (to the millisecond) carrying its id, so it needs no unique index of its own:
-- one index entry less at insert and one at DONE. A lookup by public id reads the day and the id
-- back out of it and probes that day's primary key (src/outbox/public-id.ts).
--
-- The id goes where a UUIDv7 has its random bits: 48 bits of Unix milliseconds, the version (7),
-- twelve bits left zero, the variant (binary 10), then the id in the last 62 bits. Unique because
-- the id is; in the order of created_at, then id, like any UUIDv7 of that time.
CREATE OR REPLACE FUNCTION outbox_public_id(created timestamp with time zone, id bigint)
 RETURNS uuid
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT encode(
           substring(int8send(floor(extract(epoch FROM created) * 1000)::bigint) FROM 3)
           || '\x7000'::bytea
           || int8send(id | x'8000000000000000'::bigint),
           'hex')::uuid
$function$;

-- Every writer gets it, those of the release before too (their inserts leave public_id to the
-- default, which is gone): the trigger sees the row's final id and created_at, a lane message's
-- inherited created_at included. So no row written from now on carries a random public id.
CREATE OR REPLACE FUNCTION outbox_derive_public_id()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  NEW.public_id := outbox_public_id(NEW.created_at, NEW.id);
  RETURN NEW;
END
$function$;

-- The trigger locks the outbox and every day of it: bounded, as the first cut's drop is. The
-- strongest lock the statements below need is taken first, so the migration never waits for one
-- while holding a lighter one (0002 says what that deadlocked with).
SET LOCAL lock_timeout = '5s';
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
DROP TRIGGER IF EXISTS outbox_public_id_from_row ON outbox;
CREATE TRIGGER outbox_public_id_from_row BEFORE INSERT ON outbox
  FOR EACH ROW WHEN (NEW.public_id IS NULL) EXECUTE FUNCTION outbox_derive_public_id();
ALTER TABLE outbox ALTER COLUMN public_id DROP DEFAULT;

-- The days that hold rows of the release before keep their unique index on public_id: their
-- random ids are found through it (src/outbox/public-id.ts probes only the days that have it)
-- until the retention drops the day. A day still empty, under the trigger's lock, can only ever
-- hold derived ids: its index goes now.
DO $do$
DECLARE
  r record;
  empty boolean;
BEGIN
  FOR r IN
    SELECT c.conrelid::regclass::text AS part, c.conname
      FROM pg_constraint c JOIN pg_inherits i ON i.inhrelid = c.conrelid
     WHERE i.inhparent = 'outbox'::regclass AND c.contype = 'u'
       AND c.conkey = ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = c.conrelid AND attname = 'public_id')]
  LOOP
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %s)', r.part) INTO empty;
    IF empty THEN
      EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.part, r.conname);
    END IF;
  END LOOP;
END
$do$;

-- The days made from now on: a primary key, no unique public_id. Otherwise as before (ADR 0019,
-- 0025; fillfactor 40, ADR 0022).
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
      EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', name);
      EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, day, day + interval '1 day');
    ELSE
      BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = format('%I', name)::regclass AND contype = 'p') THEN
          EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', name);
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
