-- The lean storage's second cut (ADR 0051): DONE rows by processed_at through a BRIN index instead
-- of a B-tree. A B-tree writes an entry for every message that becomes DONE; a BRIN index keeps a
-- summary (the least and greatest processed_at) of each range of 128 pages, and a row adds nothing
-- to it unless it widens that summary. A day's rows are written, and finished, in about the order
-- of time, so the summaries stay narrow and a window of processed_at reads only the pages that can
-- hold it. autosummarize has autovacuum summarise a range once the rows move past it, so the
-- pages not yet summarised (which every scan reads) are only the last few of the newest days.
--
-- The readers that walked the B-tree in processed_at order now read by day (a partition each, in
-- primary-key order inside it): src/outbox/finished-page.ts, last-finished.ts, purge.ts. A process
-- of the release before still asks for finished messages in processed_at order: its queries use
-- this index and sort what it finds, correct and slower, until it is gone.
--
-- Building the index reads every day's heap once, the outbox held whole meanwhile, so its reads
-- and writes wait for the build (docs/operating.md, "Changing the schema"); the wait for the lock
-- is bounded as the first cut's is. The strongest lock the migration needs (the DROP's) is taken
-- first: taking SHARE for the build, then ACCESS EXCLUSIVE for the drop, deadlocked with a
-- statement of the release before that held a lighter lock and wanted a row lock's (a claim, a
-- booking), seen by the upgrade drill.
SET LOCAL lock_timeout = '5s';
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
CREATE INDEX IF NOT EXISTS outbox_done_processed_brin ON outbox USING brin (processed_at) WITH (autosummarize = on)
  WHERE status = 'DONE';
DROP INDEX IF EXISTS outbox_done_processed_idx;
