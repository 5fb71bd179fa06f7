-- Trace context across the asynchronous hops (docs/observability.md): the W3C traceparent and
-- tracestate of the span that wrote an outbox message or a webhook delivery, and the trace id of each
-- webhook attempt. Nullable, no default, in no index: adding them rewrites no row, and a row written
-- with tracing off stores nothing. outbox is partitioned by day: a column added to the parent is
-- added to every partition, present and future.
--
-- Every existing table that this migration and the ones after it (0013-0019, one transaction)
-- alter or reference is locked here, at once, waiting at most 100 ms each: an upgrade from 0.3.0 runs
-- with the release before serving, whose statements take these tables in both orders (the
-- sender's claim reads the endpoints, then locks deliveries; its settle updates deliveries, then
-- reads endpoints). Taken one ALTER at a time they deadlocked with those statements (seen by the
-- upgrade drill, test/integration/db/rolling-upgrade.test.ts); taken up front, a wait ends in a
-- lock timeout that rolls the migration back, and src/db/migrate.ts runs it again a moment later.
SET LOCAL lock_timeout = '100ms';--> statement-breakpoint
LOCK TABLE "outbox", "webhook_endpoints", "webhook_deliveries", "webhook_attempts" IN ACCESS EXCLUSIVE MODE;--> statement-breakpoint
LOCK TABLE "users" IN SHARE ROW EXCLUSIVE MODE;--> statement-breakpoint
SET LOCAL lock_timeout = DEFAULT;--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "traceparent" text;--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "tracestate" text;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD COLUMN "trace_id" text;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "traceparent" text;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "tracestate" text;