-- Webhooks that are fair between hosts and safe against hostile receivers (docs/webhooks.md).
--
-- Every rotated-out secret keeps signing for its own overlap. One previous_secret column kept only
-- the last one: a second rotation inside the overlap dropped the first secret at once, and a
-- receiver still verifying with it refused every delivery. The secrets still overlapping move into
-- the list; expired ones are dropped. The two old columns stay, no longer written, for one release:
-- the previous release's workers still read them during a rollout (docs/operating.md).
ALTER TABLE "webhook_endpoints" ADD COLUMN "retired_secrets" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
UPDATE "webhook_endpoints"
   SET "retired_secrets" = jsonb_build_array(jsonb_build_object('secret', "previous_secret", 'expiresAt', "previous_secret_expires_at"))
 WHERE "previous_secret" IS NOT NULL AND "previous_secret_expires_at" > now();--> statement-breakpoint
-- A token bucket per host and manual action (test events, retries, recovers): src/webhooks/manual-rate.ts.
CREATE TABLE "webhook_host_budgets" (
	"host_id" bigint NOT NULL,
	"action" text NOT NULL,
	"tokens" double precision NOT NULL,
	"refilled_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "webhook_host_budgets_host_id_action_pk" PRIMARY KEY("host_id","action")
);--> statement-breakpoint
ALTER TABLE "webhook_host_budgets" ADD CONSTRAINT "webhook_host_budgets_host_id_users_id_fk" FOREIGN KEY ("host_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;
