-- Written by hand: drizzle-kit cannot express EXCLUDE constraints.
--
-- btree_gist lets a GiST index compare plain equality (property_id WITH =) alongside the range
-- overlap (stay WITH &&). It ships with PostgreSQL's contrib (present in the embedded server, in
-- the postgres Docker image and in managed services).
CREATE EXTENSION IF NOT EXISTS btree_gist;
--> statement-breakpoint
-- The rule that makes a double booking impossible: no two CONFIRMED bookings of one property may
-- have overlapping stays. `stay` is half-open [check_in, check_out), so back-to-back stays (one
-- checks out the day the next checks in) do not overlap. Cancelled bookings are outside the WHERE,
-- so cancelling frees the dates. This is enforced by the database at commit of the INSERT, not by
-- a read-then-write check in the service, which two concurrent requests would both pass.
-- A violation raises 23P01; the data layer maps it to 409 dates_unavailable, and the rollback
-- takes the booking's outbox row with it.
ALTER TABLE bookings
  ADD CONSTRAINT bookings_no_overlap
  EXCLUDE USING gist (property_id WITH =, stay WITH &&) WHERE (status = 'confirmed');
