-- The claim's per-key check ("is an older message of this key still PENDING?", src/outbox/claim.ts)
-- probed a PARTIAL index (key, id) WHERE status = 'PENDING'. The planner sizes a partial index
-- from the statistics, and after a quiet spell ANALYZE has seen only DONE rows: a burst then looks
-- like an empty index, and the planner scanned it whole for every candidate row instead of probing
-- it by key (2 s a claim with 20,000 pending, 30 s stalls until the next autovacuum ANALYZE). This
-- index covers every row, so its size is the table's whatever the statistics say, and probing by
-- key is the only sensible plan.
CREATE INDEX "outbox_key_idx" ON "outbox" USING btree ("key","id");--> statement-breakpoint
DROP INDEX "outbox_pending_key_idx";
