CREATE TABLE "consumer_dead_letters" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"consumer_group" text NOT NULL,
	"message_id" text NOT NULL,
	"stream_seq" bigint,
	"subject" text NOT NULL,
	"headers" jsonb NOT NULL,
	"data" jsonb NOT NULL,
	"deliveries" integer NOT NULL,
	"last_error" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"replayed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "host_earnings" (
	"consumer_group" text NOT NULL,
	"host_id" bigint NOT NULL,
	"currency" char(3) NOT NULL,
	"confirmed_total" bigint DEFAULT 0 NOT NULL,
	"cancelled_total" bigint DEFAULT 0 NOT NULL,
	"bookings" integer DEFAULT 0 NOT NULL,
	"cancellations" integer DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "host_earnings_consumer_group_host_id_currency_pk" PRIMARY KEY("consumer_group","host_id","currency")
);
--> statement-breakpoint
CREATE TABLE "processed_messages" (
	"consumer_group" text NOT NULL,
	"message_id" text NOT NULL,
	"stream_seq" bigint,
	"processed_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "processed_messages_consumer_group_message_id_pk" PRIMARY KEY("consumer_group","message_id")
);
--> statement-breakpoint
ALTER TABLE "host_earnings" ADD CONSTRAINT "host_earnings_host_id_users_id_fk" FOREIGN KEY ("host_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "consumer_dead_letters_group_message_key" ON "consumer_dead_letters" USING btree ("consumer_group","message_id");--> statement-breakpoint
CREATE INDEX "consumer_dead_letters_open_idx" ON "consumer_dead_letters" USING btree ("consumer_group","id") WHERE replayed_at is null;