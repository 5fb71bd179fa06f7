-- What each webhook attempt sent and got back in its head (docs/webhooks.md, "Portal"; ADR 0045):
-- the request's Standard Webhooks headers and the answer's headers, bounded by the sender. Nullable
-- and without a default: adding it rewrites nothing and holds its lock for an instant; attempts
-- recorded before it, and by a worker of the previous release during a rollout, stay null.
ALTER TABLE "webhook_attempts" ADD COLUMN "headers" jsonb;
