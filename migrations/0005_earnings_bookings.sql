-- The bookings each earnings ledger has counted (src/events/earnings/ledger.ts): what makes the
-- ledger count a booking once whichever message brings it, and lets a rebuild from the bookings
-- table and the stream's events meet without counting anything twice.
CREATE TABLE "earnings_bookings" (
	"consumer_group" text NOT NULL,
	"booking_id" bigint NOT NULL,
	"cancelled" boolean DEFAULT false NOT NULL,
	"counted_from" text NOT NULL,
	"counted_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "earnings_bookings_consumer_group_booking_id_pk" PRIMARY KEY("consumer_group","booking_id"),
	CONSTRAINT "earnings_bookings_counted_from_check" CHECK ("earnings_bookings"."counted_from" in ('event', 'rebuild', 'gap'))
);
--> statement-breakpoint
ALTER TABLE "earnings_bookings" ADD CONSTRAINT "earnings_bookings_booking_id_bookings_id_fk" FOREIGN KEY ("booking_id") REFERENCES "public"."bookings"("id") ON DELETE cascade ON UPDATE no action;
--> statement-breakpoint
-- Written by hand. The ledgers kept before this table existed recorded no bookings, only sums:
-- the cancellation of a booking one of them counted would find no row here and count the booking
-- a second time. So each is rebuilt from the bookings table, as `consume:earnings --replay
-- --accept-gap` does: every booking counted once, and each cancelled one's cancellation. Events
-- still on their way to a group are then skipped as already counted. (A ledger that differed from
-- the bookings table, after a replay past the stream's retention or from cancellations of
-- bookings made before the relay, is corrected by this.)
INSERT INTO "earnings_bookings" ("consumer_group", "booking_id", "cancelled", "counted_from")
SELECT g."consumer_group", b."id", b."status" = 'cancelled', 'rebuild'
  FROM (SELECT DISTINCT "consumer_group" FROM "host_earnings") g CROSS JOIN "bookings" b;
--> statement-breakpoint
DELETE FROM "host_earnings";
--> statement-breakpoint
INSERT INTO "host_earnings" ("consumer_group", "host_id", "currency", "confirmed_total", "cancelled_total", "bookings", "cancellations")
SELECT e."consumer_group", p."host_id", b."currency", sum(b."total"), coalesce(sum(b."total") FILTER (WHERE e."cancelled"), 0),
       count(*), count(*) FILTER (WHERE e."cancelled")
  FROM "earnings_bookings" e JOIN "bookings" b ON b."id" = e."booking_id" JOIN "properties" p ON p."id" = b."property_id"
 GROUP BY e."consumer_group", p."host_id", b."currency";
