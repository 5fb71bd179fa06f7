-- Trace context across the asynchronous hops (docs/observability.md): the W3C traceparent and
-- tracestate of the span that wrote an outbox message or a webhook delivery, and the trace id of each
-- webhook attempt. Nullable, no default, in no index: adding them rewrites no row, and a row written
-- with tracing off stores nothing. outbox is partitioned by day: a column added to the parent is
-- added to every partition, present and future.
ALTER TABLE "outbox" ADD COLUMN "traceparent" text;--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "tracestate" text;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD COLUMN "trace_id" text;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "traceparent" text;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "tracestate" text;