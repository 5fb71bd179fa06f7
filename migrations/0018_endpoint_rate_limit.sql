-- A host's optional delivery rate per endpoint (docs/adr/0047-webhook-rate-per-endpoint.md).
-- Both columns nullable with no default: adding them rewrites nothing, and a worker of the previous
-- release, which names its columns, runs beside this schema during a rollout (null: no limit).
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_limit_per_second" integer;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_next_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD CONSTRAINT "webhook_endpoints_rate_limit_range" CHECK ("webhook_endpoints"."rate_limit_per_second" between 1 and 1000);
