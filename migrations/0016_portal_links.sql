-- The webhook portal's links (docs/webhooks.md, "Portal"; ADR 0045): a token a host hands on to its
-- developer, stored as its SHA-256 only, and every request made with it. Two new tables: nothing
-- existing is rewritten or locked.
CREATE TABLE "webhook_portal_link_uses" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"link_id" bigint NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL,
	"method" text NOT NULL,
	"route" text NOT NULL,
	"target" uuid,
	"status_code" integer NOT NULL,
	"ip" text NOT NULL,
	"user_agent" text DEFAULT '' NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_portal_links" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"public_id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"host_id" bigint NOT NULL,
	"token_hash" text NOT NULL,
	"access" text NOT NULL,
	"label" text DEFAULT '' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "webhook_portal_links_public_id_unique" UNIQUE("public_id"),
	CONSTRAINT "webhook_portal_links_token_hash_unique" UNIQUE("token_hash"),
	CONSTRAINT "webhook_portal_links_access_check" CHECK ("webhook_portal_links"."access" in ('read', 'full'))
);
--> statement-breakpoint
ALTER TABLE "webhook_portal_link_uses" ADD CONSTRAINT "webhook_portal_link_uses_link_id_webhook_portal_links_id_fk" FOREIGN KEY ("link_id") REFERENCES "public"."webhook_portal_links"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_portal_links" ADD CONSTRAINT "webhook_portal_links_host_id_users_id_fk" FOREIGN KEY ("host_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "webhook_portal_link_uses_link_idx" ON "webhook_portal_link_uses" USING btree ("link_id","id");--> statement-breakpoint
CREATE INDEX "webhook_portal_links_host_idx" ON "webhook_portal_links" USING btree ("host_id","id");
