-- The outbox's days ahead are made whatever is missing, and a table in the way is adopted (ADR 0025).
--
-- Until now outbox_ensure_partitions made the days after the LAST partition's end. A day missing
-- in the middle (today's partition detached and dropped by hand, with tomorrow's still there) was
-- never made again: every booking of that day failed, and nothing mended it. It now makes every
-- day from `at`'s (or the last partition's end, if that is earlier) to `days_ahead` days after
-- `at`'s that no partition covers, so the same call mends a hole. The API calls it when a write finds no partition for its row (src/db/transaction.ts), and
-- retries the write; migrations and the worker's housekeeping call it as before.
--
-- A day's name taken by a table that is not a partition of the outbox (a day detached by hand or
-- by a tool and never dropped, a restore) made CREATE TABLE fail, and with it `npm run migrate`
-- and every start. Such a table is now adopted: given the primary key and unique public id a
-- partition needs if it lacks them, and attached for its day. ATTACH checks every row's created_at
-- against the day, so a table that is not a day of the outbox, or holds other days' rows, is
-- refused; the call then fails with one line that names the table and the fix (rename or drop it).
-- Adopting keeps whatever messages the table holds: they are messages the outbox owes or keeps.
--
-- A partition still pending detach (an interrupted DETACH … CONCURRENTLY) counts as covering its
-- day: PostgreSQL would refuse another partition over it, and the housekeeping finishes it.
CREATE OR REPLACE FUNCTION outbox_ensure_partitions(at timestamptz DEFAULT now(), days_ahead integer DEFAULT 7) RETURNS text[]
LANGUAGE plpgsql AS $$
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
END $$;
