CREATE TABLE "bookings" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"public_id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"property_id" bigint NOT NULL,
	"guest_id" bigint NOT NULL,
	"check_in" date NOT NULL,
	"check_out" date NOT NULL,
	"stay" daterange GENERATED ALWAYS AS (daterange(check_in, check_out, '[)')) STORED NOT NULL,
	"guests" integer NOT NULL,
	"status" text DEFAULT 'confirmed' NOT NULL,
	"currency" char(3) NOT NULL,
	"nights" integer NOT NULL,
	"nightly_price" integer NOT NULL,
	"subtotal" integer NOT NULL,
	"cleaning_fee" integer NOT NULL,
	"service_fee" integer NOT NULL,
	"total" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"cancelled_at" timestamp with time zone,
	CONSTRAINT "bookings_public_id_unique" UNIQUE("public_id"),
	CONSTRAINT "bookings_dates_check" CHECK ("bookings"."check_out" > "bookings"."check_in"),
	CONSTRAINT "bookings_status_check" CHECK ("bookings"."status" in ('confirmed', 'cancelled'))
);
--> statement-breakpoint
CREATE TABLE "idempotency_keys" (
	"user_id" bigint NOT NULL,
	"key" text NOT NULL,
	"request_hash" text NOT NULL,
	"response_status" integer,
	"response_body" jsonb,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "idempotency_keys_user_id_key_pk" PRIMARY KEY("user_id","key")
);
--> statement-breakpoint
CREATE TABLE "outbox" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"public_id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"topic" text NOT NULL,
	"key" text,
	"payload" jsonb NOT NULL,
	"status" text DEFAULT 'PENDING' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"available_at" timestamp with time zone DEFAULT now() NOT NULL,
	"claim_id" uuid,
	"claimed_at" timestamp with time zone,
	"handlers_done" text[] DEFAULT '{}'::text[] NOT NULL,
	"processed_at" timestamp with time zone,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "outbox_public_id_unique" UNIQUE("public_id"),
	CONSTRAINT "outbox_status_check" CHECK ("outbox"."status" in ('PENDING', 'DONE', 'DEAD'))
);
--> statement-breakpoint
CREATE TABLE "outbox_audit" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"actor_user_id" bigint,
	"actor" text NOT NULL,
	"action" text NOT NULL,
	"criteria" jsonb NOT NULL,
	"affected" integer NOT NULL,
	"message_ids" uuid[] NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "properties" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"public_id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"host_id" bigint NOT NULL,
	"title" text NOT NULL,
	"description" text DEFAULT '' NOT NULL,
	"city" text NOT NULL,
	"country" char(2) NOT NULL,
	"currency" char(3) DEFAULT 'EUR' NOT NULL,
	"nightly_price" integer NOT NULL,
	"cleaning_fee" integer DEFAULT 0 NOT NULL,
	"max_guests" integer NOT NULL,
	"active" boolean DEFAULT true NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "properties_public_id_unique" UNIQUE("public_id"),
	CONSTRAINT "properties_prices_check" CHECK ("properties"."nightly_price" > 0 and "properties"."cleaning_fee" >= 0),
	CONSTRAINT "properties_max_guests_check" CHECK ("properties"."max_guests" between 1 and 100)
);
--> statement-breakpoint
CREATE TABLE "search_documents" (
	"property_id" uuid PRIMARY KEY NOT NULL,
	"title" text NOT NULL,
	"description" text NOT NULL,
	"city" text NOT NULL,
	"country" char(2) NOT NULL,
	"currency" char(3) NOT NULL,
	"nightly_price" integer NOT NULL,
	"max_guests" integer NOT NULL,
	"document" "tsvector" GENERATED ALWAYS AS (setweight(to_tsvector('simple', coalesce(title, '')), 'A') || setweight(to_tsvector('simple', coalesce(city, '') || ' ' || coalesce(country, '')), 'B') || setweight(to_tsvector('simple', coalesce(description, '')), 'C')) STORED NOT NULL,
	"source_updated_at" timestamp with time zone NOT NULL,
	"indexed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sessions" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"token_hash" text NOT NULL,
	"user_id" bigint NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"revoked_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "sessions_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
CREATE TABLE "users" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"public_id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"email" text NOT NULL,
	"name" text NOT NULL,
	"role" text NOT NULL,
	"password_hash" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "users_public_id_unique" UNIQUE("public_id"),
	CONSTRAINT "users_role_check" CHECK ("users"."role" in ('guest', 'host', 'admin'))
);
--> statement-breakpoint
ALTER TABLE "bookings" ADD CONSTRAINT "bookings_property_id_properties_id_fk" FOREIGN KEY ("property_id") REFERENCES "public"."properties"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "bookings" ADD CONSTRAINT "bookings_guest_id_users_id_fk" FOREIGN KEY ("guest_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "outbox_audit" ADD CONSTRAINT "outbox_audit_actor_user_id_users_id_fk" FOREIGN KEY ("actor_user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "properties" ADD CONSTRAINT "properties_host_id_users_id_fk" FOREIGN KEY ("host_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sessions" ADD CONSTRAINT "sessions_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "bookings_guest_idx" ON "bookings" USING btree ("guest_id","id");--> statement-breakpoint
CREATE INDEX "bookings_property_idx" ON "bookings" USING btree ("property_id","id");--> statement-breakpoint
CREATE INDEX "idempotency_keys_expires_idx" ON "idempotency_keys" USING btree ("expires_at");--> statement-breakpoint
-- The worker's claim index (see src/outbox/claim.ts). PARTIAL (WHERE status = 'PENDING') because
-- DONE rows come to outnumber live ones by orders of magnitude: the index holds only what can still
-- be claimed, so a claim costs the same with a million DONE rows behind it as with none, and it
-- walks the due rows already in available_at order (no sort step).
CREATE INDEX "outbox_pending_available_idx" ON "outbox" USING btree ("available_at","id") WHERE status = 'PENDING';--> statement-breakpoint
CREATE INDEX "outbox_pending_key_idx" ON "outbox" USING btree ("key","id") WHERE status = 'PENDING';--> statement-breakpoint
CREATE INDEX "outbox_dead_idx" ON "outbox" USING btree ("topic","id") WHERE status = 'DEAD';--> statement-breakpoint
CREATE INDEX "outbox_done_processed_idx" ON "outbox" USING btree ("processed_at") WHERE status = 'DONE';--> statement-breakpoint
CREATE INDEX "properties_host_idx" ON "properties" USING btree ("host_id");--> statement-breakpoint
CREATE INDEX "search_documents_document_idx" ON "search_documents" USING gin ("document");--> statement-breakpoint
CREATE INDEX "search_documents_city_idx" ON "search_documents" USING btree (lower("city"));--> statement-breakpoint
CREATE INDEX "search_documents_country_idx" ON "search_documents" USING btree ("country");--> statement-breakpoint
CREATE INDEX "sessions_user_idx" ON "sessions" USING btree ("user_id");--> statement-breakpoint
CREATE UNIQUE INDEX "users_email_lower_key" ON "users" USING btree (lower("email"));